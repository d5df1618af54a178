#!/usr/bin/env bash
# Creates (or reuses) the Python venv that the Rust integration tests spawn their helpers
# from (tests/py/*.py), at .qtg/venv-test.
#
#   scripts/ensure-test-venv.sh       prints ONLY the absolute path of the venv's python on
#                                     stdout and exits 0; every diagnostic goes to stderr
#
# The venv is reused while the stamp (hash of `python3 -c sys.version` + REQUIREMENTS) in
# $VENV/.qtg-requirements matches; otherwise it is rebuilt from scratch. Needs python3 and
# PyPI only. Same approach as scripts/lint-deploy.sh (including the Debian python3-venv
# fallback when `python3 -m venv` has no ensurepip).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.qtg/venv-test"
# Exact pins that resolve together on CPython 3.11 (typing_extensions: grpcio's only dep).
REQUIREMENTS=(
  "grpcio==1.85.3"
  "opentelemetry-proto==1.45.2"
  "protobuf==7.36.2"
  "prometheus_client==0.26.0"
  "typing_extensions==4.16.0"
  "jsonschema==4.26.0"
  "jsonschema-specifications==2025.9.1"
  "referencing==0.37.0"
  "rpds-py==2026.9.1"
  "attrs==26.1.0"
  # The executor in another language of tests/tests/polyglot.rs: stubs generated at test
  # time, RFC 8785 for the signed bytes.
  "grpcio-tools==1.85.1"
  "rfc8785==0.1.4"
  # The schema-driven fuzzer of tests/tests/fuzz.rs, with its dependencies.
  "schemathesis==4.32.5"
  "anyio==4.16.0"
  "certifi==2026.10.19.post1"
  "charset-normalizer==3.5.3"
  "click==8.5.1"
  "graphql-core==3.3.2"
  "harfile==0.6.0"
  "hypothesis==6.170.17"
  "hypothesis-graphql==0.13.5"
  "idna==3.20"
  "iniconfig==2.3.1"
  "jsonschema_rs==0.60.3"
  "markdown-it-py==4.3.0"
  "MarkupSafe==3.0.4"
  "mdurl==0.1.2"
  "packaging==26.4"
  "pluggy==1.7.0"
  "Pygments==2.21.0"
  "pyrate-limiter==4.5.1"
  "pytest==9.2.0"
  "PyYAML==6.0.4"
  "requests==2.34.2"
  "rich==15.0.0"
  "sortedcontainers==2.4.0"
  "urllib3==2.8.0"
  "Werkzeug==3.1.9"
  # Receivers of tests/tests/notify.rs and callbacks.rs: Standard Webhooks verified by the
  # reference library, mail by a real SMTP server (STARTTLS, AUTH).
  "standardwebhooks==1.1.0"
  "aiosmtpd==1.4.6"
  "atpublic==9.0.0"
)

# No __pycache__ in the work tree (the venv's own site-packages are outside tests/ anyway).
export PYTHONDONTWRITEBYTECODE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_NO_INPUT=1

# Everything below reports on stderr; stdout carries only the final path.
exec 3>&1 1>&2

log() { printf 'ensure-test-venv: %s\n' "$*" >&2; }

if ! command -v python3 >/dev/null; then
  log "python3 is required"
  exit 1
fi

# Integration tests run in parallel and may all call this at once: one builds, the rest wait
# on the lock and then find the stamp matching.
mkdir -p "$ROOT/.qtg"
if command -v flock >/dev/null; then
  exec 4>"$ROOT/.qtg/venv-test.lock"
  flock 4
fi

stamp="$(printf '%s\n' "$(python3 -c 'import sys; print(sys.version)')" "${REQUIREMENTS[@]}" | sha256sum | cut -c1-16)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$VENV/.qtg-requirements" 2>/dev/null)" != "$stamp" ]]; then
  log "creating $VENV"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  errf="$(mktemp)"
  trap 'rm -f "$errf"' EXIT
  if ! python3 -m venv "$VENV" 2>"$errf"; then
    # Debian ships venv's pip bootstrap (ensurepip) separately.
    rm -rf "$VENV"
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      pyver="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
      log "python3 -m venv failed; installing python3-venv with apt-get"
      { apt-get install -y -qq "python${pyver}-venv" || apt-get install -y -qq python3-venv \
        || { apt-get update -qq && apt-get install -y -qq python3-venv; }; } >/dev/null \
        || { log "could not install python3-venv"; exit 1; }
      python3 -m venv "$VENV" || { log "python3 -m venv failed"; exit 1; }
    else
      cat "$errf" >&2
      log "python3 -m venv failed: install python3-venv (Debian) and rerun"
      exit 1
    fi
  fi
  if ! "$VENV/bin/python" -m pip install -q --upgrade pip \
    || ! "$VENV/bin/python" -m pip install -q "${REQUIREMENTS[@]}"; then
    log "pip install failed"
    rm -rf "$VENV"
    exit 1
  fi
  # Check that the pieces the helpers use import (catches a broken wheel before a test does).
  if ! "$VENV/bin/python" -c 'import grpc, prometheus_client.parser, jsonschema
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from standardwebhooks.webhooks import Webhook
import aiosmtpd.controller' ; then
    log "installed packages do not import"
    rm -rf "$VENV"
    exit 1
  fi
  echo "$stamp" >"$VENV/.qtg-requirements"
  log "created; installed: ${REQUIREMENTS[*]}"
else
  log "reused $VENV (requirements unchanged)"
fi

printf '%s\n' "$VENV/bin/python" >&3
