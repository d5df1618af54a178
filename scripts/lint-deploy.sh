#!/usr/bin/env bash
# Lints, renders and validates the Kubernetes deployment (helm/qtg, k8s/), then runs the
# assertions in deploy-tests/test_render.py. Needs python3 and PyPI only: no helm, kubectl,
# kustomize or Docker, and no cluster.
#
#   scripts/lint-deploy.sh            exit 0 when everything passes, 1 (with a list) otherwise
#
# Tools, all from a venv at .qtg/venv-deploy (created once, reused while REQUIREMENTS below
# are unchanged):
#   render + lint   helm-python-sdk: a wheel that bundles libhelm_c, a C library over Helm's
#                   own Go SDK (Helm v4), driven through ctypes. It renders, schema-checks and
#                   lints charts offline (no cluster; `lookup` returns nothing) and ships no
#                   helm binary, so nothing here needs one.
#   validation      kubernetes-validate --strict against the Kubernetes $KUBE_VERSION OpenAPI
#                   schemas it bundles. It has no schema for CRDs: ServiceMonitor and
#                   PrometheusRule (monitoring.coreos.com/v1) are left out of that step
#                   (test_render.py checks their content instead).
#   kustomize       `kubectl kustomize` when kubectl is installed (QTG_KUBECTL may name one),
#                   else a standalone `kustomize build`, else a small Python implementation of
#                   the features k8s/ uses (deploy-tests/deploylib.py mini_kustomize; the helm
#                   SDK bundles no kustomize). When kubectl exists the tests also check that
#                   the fallback builds exactly what kubectl builds. QTG_KUSTOMIZE=python
#                   (or kubectl, kustomize) forces one.
#   assertions      pytest deploy-tests/test_render.py
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.qtg/venv-deploy"
OUT="$ROOT/.qtg/deploy-render"
KUBE_VERSION="1.30.0"
REQUIREMENTS=(
  "helm-python-sdk==0.2.2"
  "kubernetes-validate==1.37.0"
  "PyYAML>=6,<7"
  "jsonschema>=4.20,<5"
  "pytest>=8,<10"
)

# No __pycache__ or .pytest_cache in the work tree.
export PYTHONDONTWRITEBYTECODE=1

FAILED=()
step() { printf '\n== %s\n' "$*"; }
fail() { FAILED+=("$1"); printf 'FAIL %s\n' "$1" >&2; }

# --- venv -------------------------------------------------------------------------------
step "python venv ($VENV)"
if ! command -v python3 >/dev/null; then
  echo "python3 is required" >&2
  exit 1
fi
stamp="$(printf '%s\n' "$(python3 -c 'import sys; print(sys.version)')" "${REQUIREMENTS[@]}" | sha256sum | cut -c1-16)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$VENV/.qtg-requirements" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! python3 -m venv "$VENV" 2>/tmp/qtg-venv.err; then
    # Debian ships venv's pip bootstrap (ensurepip) separately.
    rm -rf "$VENV"
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      pyver="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
      echo "python3 -m venv failed; installing python3-venv with apt-get"
      { apt-get install -y -qq "python${pyver}-venv" || apt-get install -y -qq python3-venv \
        || { apt-get update -qq && apt-get install -y -qq python3-venv; }; } >/dev/null \
        || { echo "could not install python3-venv" >&2; exit 1; }
      python3 -m venv "$VENV" || { echo "python3 -m venv failed" >&2; exit 1; }
    else
      cat /tmp/qtg-venv.err >&2
      echo "python3 -m venv failed: install python3-venv (Debian) and rerun" >&2
      exit 1
    fi
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip \
    && "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${REQUIREMENTS[@]}" \
    || { echo "pip install failed" >&2; rm -rf "$VENV"; exit 1; }
  echo "$stamp" >"$VENV/.qtg-requirements"
  echo "created; installed: ${REQUIREMENTS[*]}"
else
  echo "reused (requirements unchanged)"
fi
PY="$VENV/bin/python"

# --- values schema ----------------------------------------------------------------------
step "values.schema.json"
if "$PY" - <<'EOF'
import json, sys, yaml, jsonschema
schema = json.load(open("helm/qtg/values.schema.json"))
jsonschema.Draft202012Validator.check_schema(schema)
bad = 0
# The CI values files are overrides: the helm SDK checks the merged values while rendering.
for e in jsonschema.Draft202012Validator(schema).iter_errors(yaml.safe_load(open("helm/qtg/values.yaml"))):
    bad = 1
    print(f"FAIL helm/qtg/values.yaml {e.json_path}: {e.message}", file=sys.stderr)
if not bad:
    print("ok   schema is valid draft 2020-12; values.yaml conforms")
sys.exit(bad)
EOF
then :; else fail "values.schema.json"; fi
if ! "$PY" -c 'import json; json.load(open("helm/qtg/dashboards/qtg.json"))'; then
  fail "helm/qtg/dashboards/qtg.json is not JSON"
fi

# --- helm lint ----------------------------------------------------------------------------
step "helm lint (helm-python-sdk)"
# libhelm_c logs Go warnings ("missing required values" while linting) on stderr: kept.
"$PY" deploy-tests/deploy_check.py lint || fail "helm lint"

# --- render -----------------------------------------------------------------------------
step "render chart (default + full values) and kustomize (k8s/base, k8s/overlays/example)"
"$PY" deploy-tests/deploy_check.py render "$OUT" || fail "render"

# --- kubernetes-validate ------------------------------------------------------------------
step "kubernetes-validate --strict -k $KUBE_VERSION"
shopt -s nullglob
files=("$OUT"/*.k8s.yaml)
if ((${#files[@]} == 0)); then
  fail "nothing rendered to validate"
fi
if ((${#files[@]})); then
  # One process for every file (loading the schemas dominates); it names each failing file.
  if out="$("$VENV/bin/kubernetes-validate" --strict --quiet -k "$KUBE_VERSION" "${files[@]}" 2>&1)"; then
    for f in "${files[@]}"; do
      echo "ok   ${f#"$ROOT"/}: $(grep -c '^kind:' "$f") objects"
    done
  else
    printf '%s\n' "$out" >&2
    fail "kubernetes-validate: $(grep -c '^ERROR' <<<"$out") object(s) invalid"
  fi
fi

# --- assertions ---------------------------------------------------------------------------
step "deploy-tests/test_render.py"
"$PY" -m pytest -q -p no:cacheprovider deploy-tests/test_render.py || fail "deploy-tests/test_render.py"

# --- summary ------------------------------------------------------------------------------
echo
if ((${#FAILED[@]})); then
  echo "lint-deploy: ${#FAILED[@]} step(s) failed:" >&2
  printf '  - %s\n' "${FAILED[@]}" >&2
  exit 1
fi
echo "lint-deploy: all checks passed (rendered manifests in ${OUT#"$ROOT"/}/)"
