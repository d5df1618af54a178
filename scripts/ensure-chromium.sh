#!/usr/bin/env bash
# The console's browser test needs headless Chromium and its WebDriver: Debian's `chromium`
# and `chromium-driver` packages, installed with apt when missing. Prints the chromedriver path
# (chromium is /usr/bin/chromium beside it).
set -euo pipefail
if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1; then
  echo "ensure-chromium: installing chromium and chromium-driver from the system's packages" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >&2
fi
command -v chromedriver
