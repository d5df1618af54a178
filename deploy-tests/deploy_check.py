"""Steps of scripts/lint-deploy.sh that need Python (run inside .qtg/venv-deploy).

    deploy_check.py lint                 helm lint (strict) with both CI values files
    deploy_check.py render OUTDIR        chart renders and kustomize builds into OUTDIR:
                                           <name>.yaml       every object
                                           <name>.k8s.yaml   the objects kubernetes-validate
                                                             can check (CRD kinds left out)
Exit status 1 on any failure, with what failed on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import deploylib as d  # noqa: E402

VALUES = {"chart-default": "default-values.yaml", "chart-full": "full-values.yaml"}
KUSTOMIZATIONS = {"k8s-base": d.K8S / "base", "k8s-overlay-example": d.K8S / "overlays" / "example"}


def lint() -> int:
    import helm_python as helm

    print(f"helm SDK {helm.helm_sdk_version()} via helm-python-sdk {helm.__version__} (libhelm_c, no helm binary)")
    failed = 0
    for name, values in VALUES.items():
        problems = d.lint_chart(d.values_file(values))
        if problems:
            failed = 1
            print(f"FAIL helm lint --strict ({values}):", *problems, sep="\n  ", file=sys.stderr)
        else:
            print(f"ok   helm lint --strict --kube-version v{d.KUBE_VERSION} -f ci/{values}")
    return failed


def write(out: Path, name: str, docs: list[dict]) -> None:
    (out / f"{name}.yaml").write_text(d.dump_all(docs))
    checkable = [o for o in docs if o["kind"] not in d.CRD_KINDS]
    skipped = sorted({o["kind"] for o in docs if o["kind"] in d.CRD_KINDS})
    (out / f"{name}.k8s.yaml").write_text(d.dump_all(checkable))
    note = f"; not validated (CRDs, no schema in kubernetes-validate): {', '.join(skipped)}" if skipped else ""
    print(f"ok   {name}: {len(docs)} objects -> {out.name}/{name}.yaml{note}")


def render(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.yaml"):
        old.unlink()
    failed = 0
    for name, values in VALUES.items():
        try:
            write(out, name, d.manifests(d.render_chart(d.values_file(values))))
        except Exception as e:  # noqa: BLE001 - report and go on
            failed = 1
            print(f"FAIL render helm/qtg with ci/{values}: {e}", file=sys.stderr)
    for name, path in KUSTOMIZATIONS.items():
        try:
            docs, tool = d.kustomize_build(path)
            print(f"     {path.relative_to(d.ROOT)} built with {tool}")
            write(out, name, docs)
        except Exception as e:  # noqa: BLE001
            failed = 1
            print(f"FAIL kustomize {path.relative_to(d.ROOT)}: {e}", file=sys.stderr)
    return failed


def main(argv: list[str]) -> int:
    if argv[:1] == ["lint"]:
        return lint()
    if len(argv) == 2 and argv[0] == "render":
        return render(Path(argv[1]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
