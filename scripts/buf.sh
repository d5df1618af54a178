#!/usr/bin/env bash
# Protocol compatibility checks for proto/ (the executor and signer protos third parties build
# against), with buf as the gRPC ecosystem does it:
#
#   buf lint                                          STANDARD rules, exceptions in buf.yaml
#   buf breaking proto --against proto-released       FILE rules against the last release's
#                                                     protos (see proto-released/README.md)
#
#   scripts/buf.sh        exit 0 when both pass, non-zero otherwise; everything goes to stderr
#
# buf comes from the npm package @bufbuild/buf (it ships the native binary as an optional
# per-platform dependency), installed with npm into the prefix .qtg/buf/ when missing or when
# BUF_VERSION below changed, and reused otherwise. Needs node + npm, and the npm registry for
# the install only: the checks read local files (no remote deps; the well-known types are
# built into buf) and run offline. buf's cache goes to .qtg/buf/cache, not ~/.cache.
set -euo pipefail

BUF_VERSION="1.75.0"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PREFIX="$ROOT/.qtg/buf"
BUF="$PREFIX/node_modules/.bin/buf"
export BUF_CACHE_DIR="$PREFIX/cache"

log() { printf 'buf.sh: %s\n' "$*" >&2; }
now_ms() { date +%s%3N; }
t0="$(now_ms)"

# --- install (only when missing or the pin changed) -----------------------------------------
mkdir -p "$ROOT/.qtg"
if command -v flock >/dev/null; then
  exec 9>"$ROOT/.qtg/buf.lock"
  flock 9
fi
installed="$("$BUF" --version 2>/dev/null || true)"
if [[ "$installed" != "$BUF_VERSION" ]]; then
  for tool in node npm; do
    command -v "$tool" >/dev/null || { log "$tool is required to install buf (npm @bufbuild/buf)"; exit 1; }
  done
  log "installing @bufbuild/buf@$BUF_VERSION into ${PREFIX#"$ROOT"/}/ (found: ${installed:-none})"
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  if ! npm install --prefix "$PREFIX" --no-audit --no-fund "@bufbuild/buf@$BUF_VERSION" >&2; then
    log "npm install failed"
    rm -rf "$PREFIX"
    exit 1
  fi
  installed="$("$BUF" --version 2>/dev/null || true)"
  if [[ "$installed" != "$BUF_VERSION" ]]; then
    log "installed buf reports version '${installed}', expected $BUF_VERSION"
    rm -rf "$PREFIX"
    exit 1
  fi
else
  log "reusing buf $BUF_VERSION in ${PREFIX#"$ROOT"/}/"
fi

# --- checks (both run; any failure fails the script) ----------------------------------------
[[ -d proto-released ]] || { log "proto-released/ is missing (see proto-released/README.md)"; exit 1; }

FAILED=()
run() {
  local name="$1"; shift
  local t; t="$(now_ms)"
  log "\$ buf $*"
  if "$BUF" "$@" >&2; then
    log "$name: ok ($(( $(now_ms) - t )) ms)"
  else
    FAILED+=("$name")
    log "$name: FAILED"
  fi
}
run "lint" lint
run "breaking" breaking proto --against proto-released

# The wire contract buf cannot see (the signature's input, the canonical bytes, what a result
# means): its digest is recorded in proto/wire-contract.json (tests/tests/wire_contract.rs
# keeps it true); a digest that differs from the release's needs a step of protocol_version or
# of the signature version (docs/executors.md, "Versions").
wire() {
  local t; t="$(now_ms)"
  if python3 - proto/wire-contract.json proto-released/wire-contract.json >&2 <<'PY'
import json, sys
cur, rel = (json.load(open(p)) for p in sys.argv[1:3])
same = lambda k: cur.get(k) == rel.get(k)
if cur.get("digest") != rel.get("digest") and same("protocol_version") and same("signature_version"):
    sys.exit("the wire contract changed (digest %s, released %s) without a step of protocol_version (%s) "
             "or of the signature version (%s)" % (cur.get("digest"), rel.get("digest"),
             cur.get("protocol_version"), cur.get("signature_version")))
print("wire contract: protocol_version %s (released %s), signature %s (released %s)" % (
    cur.get("protocol_version"), rel.get("protocol_version"), cur.get("signature_version"), rel.get("signature_version")))
PY
  then
    log "wire: ok ($(( $(now_ms) - t )) ms)"
  else
    FAILED+=("wire")
    log "wire: FAILED"
  fi
}
wire

if (( ${#FAILED[@]} )); then
  log "failed: ${FAILED[*]} ($(( $(now_ms) - t0 )) ms)"
  [[ " ${FAILED[*]} " == *" breaking "* ]] && \
    log "a breaking change to a released package needs a new package version (v2); see proto-released/README.md"
  exit 1
fi
log "proto compatibility ok ($(( $(now_ms) - t0 )) ms)"
