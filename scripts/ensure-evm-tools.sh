#!/usr/bin/env bash
# The EVM lane's real parts for tests and `make run`: anvil (a local Ethereum node, from the npm
# package @foundry-rs/anvil, which ships the binary) and solc (the npm package `solc`), pinned,
# installed under .qtg/evm when missing or when the pins change. Prints the anvil binary's path.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir="$here/.qtg/evm"
pins="@foundry-rs/anvil@1.7.1 solc@0.8.28"
if [ ! -f "$dir/pins" ] || [ "$(cat "$dir/pins")" != "$pins" ] || [ ! -e "$dir/node_modules/.bin/anvil" ]; then
  command -v npm >/dev/null || { echo "ensure-evm-tools: npm is needed (install Node.js)" >&2; exit 1; }
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  (cd "$dir" && npm install --no-audit --no-fund --silent --prefix "$dir" $pins >&2)
  echo "$pins" > "$dir/pins"
fi
# The platform package's binary itself (the .bin/anvil wrapper needs node at every start).
bin=$(ls "$dir"/node_modules/@foundry-rs/anvil-*/bin/anvil 2>/dev/null | head -1)
[ -x "$bin" ] || bin="$dir/node_modules/.bin/anvil"
echo "$bin"
