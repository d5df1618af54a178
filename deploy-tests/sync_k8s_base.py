"""Writes k8s/base from the chart's default render (helm/qtg + ci/default-values.yaml, release
"qtg"), less what only Helm needs (deploylib.to_plain). Run it after changing the chart:

    .qtg/venv-deploy/bin/python deploy-tests/sync_k8s_base.py

test_render.py fails while k8s/base and the chart's default render disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import deploylib as d  # noqa: E402

HEADER = ("# Generated from helm/qtg (ci/default-values.yaml, release \"qtg\") by\n"
          "# deploy-tests/sync_k8s_base.py: change the chart, then regenerate. Do not edit.\n")

# Apply order when read top to bottom (kustomize sorts by kind anyway).
ORDER = ["ServiceAccount", "ConfigMap", "NetworkPolicy", "Job", "Service", "Deployment",
         "PodDisruptionBudget", "HorizontalPodAutoscaler"]


def main() -> int:
    base = d.K8S / "base"
    base.mkdir(parents=True, exist_ok=True)
    docs = d.to_plain(d.manifests(d.render_chart(d.values_file("default-values.yaml"))))
    docs.sort(key=lambda o: (ORDER.index(o["kind"]) if o["kind"] in ORDER else len(ORDER), o["metadata"]["name"]))
    for old in base.glob("*.yaml"):
        old.unlink()
    files = []
    for doc in docs:
        name = d.base_file_name(doc)
        if name in files:
            raise SystemExit(f"two objects map to {name}")
        (base / name).write_text(HEADER + d.dump_all([doc]))
        files.append(name)
    resources = "".join(f"  - {f}\n" for f in files)
    (base / "kustomization.yaml").write_text(
        HEADER
        + "# The Secret named in the Deployments and the Job (qtg-secrets) is not here: create it\n"
        + "# out of band (see k8s/README.md). Apply the migration Job first and wait for it.\n"
        + "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + resources)
    print(f"wrote {len(files)} objects to {base.relative_to(d.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
