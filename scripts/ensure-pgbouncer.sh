#!/usr/bin/env bash
# The pooler test (tests/tests/pooler.rs) runs qtg through Debian's PgBouncer, installed with
# apt when missing (the package's own service is not used). Prints the pgbouncer path.
set -euo pipefail
if ! command -v pgbouncer >/dev/null 2>&1; then
  echo "ensure-pgbouncer: installing pgbouncer from the system's packages" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pgbouncer >&2
fi
command -v pgbouncer
