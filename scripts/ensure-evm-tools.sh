#!/usr/bin/env bash
# The EVM lane's real parts for tests and `make run`: anvil (a local Ethereum node, from the npm
# package @foundry-rs/anvil, which ships the binary) and solc (the npm package `solc`), pinned,
# installed under .qtg/evm when missing or when the pins change, and Chainlink's CCIP contracts
# (below). Prints the anvil binary's path.
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
# Chainlink's CCIP 1.6 lane as Chainlink releases it: the ABIs and creation bytecode the npm
# package @chainlink/contracts-ccip ships (abi/<version>/, bytecode/<version>/), for the CCIP
# tests and `make run` (qtg-ccip-sim deploys them). `npm pack`, not `npm install`: the package's
# own dependencies (Solidity sources) are not needed and one of them is fetched from GitHub.
# The tarball is checked against its pinned sha256 before it is unpacked.
ccip_pin="@chainlink/contracts-ccip@1.6.4"
ccip_sha256=634d6093519971c628dd809a05b5a1fcb73117c8dbfc9ba6080afa7bd7a54b10
if [ ! -f "$dir/ccip/pin" ] || [ "$(cat "$dir/ccip/pin")" != "$ccip_pin" ]; then
  command -v npm >/dev/null || { echo "ensure-evm-tools: npm is needed (install Node.js)" >&2; exit 1; }
  rm -rf "$dir/ccip" && mkdir -p "$dir/ccip"
  tarball=$(cd "$dir/ccip" && npm pack --silent "$ccip_pin" 2>/dev/null | tail -1)
  echo "$ccip_sha256  $dir/ccip/$tarball" | sha256sum -c --quiet - >&2 \
    || { echo "ensure-evm-tools: $ccip_pin does not match its pinned sha256" >&2; rm -rf "$dir/ccip"; exit 1; }
  tar -xzf "$dir/ccip/$tarball" -C "$dir/ccip" package/abi package/bytecode package/package.json
  rm -f "$dir/ccip/$tarball"
  echo "$ccip_pin" > "$dir/ccip/pin"
fi
# The platform package's binary itself (the .bin/anvil wrapper needs node at every start).
bin=$(ls "$dir"/node_modules/@foundry-rs/anvil-*/bin/anvil 2>/dev/null | head -1)
[ -x "$bin" ] || bin="$dir/node_modules/.bin/anvil"
echo "$bin"
