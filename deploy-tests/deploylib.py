"""Rendering helpers for the deployment checks (scripts/lint-deploy.sh, test_render.py).

Helm: the `helm-python-sdk` wheel (import name `helm_python`) bundles libhelm_c, a C ABI over
Helm's own Go SDK (v4), and renders, lints and schema-checks charts offline with no helm
binary. Kustomize: `kubectl kustomize` when kubectl is on PATH (or QTG_KUBECTL names one),
else `kustomize build` when a standalone kustomize is on PATH, else `mini_kustomize` below, a
small Python implementation of the subset k8s/ uses (resources, namespace, images, patches
with strategic merge) -- the helm SDK does not bundle kustomize. The checks compare the
fallback with kubectl whenever kubectl exists, so it cannot drift unnoticed.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "qtg"
CI_VALUES = CHART / "ci"
K8S = ROOT / "k8s"
RELEASE = "qtg"
NAMESPACE = "qtg"
KUBE_VERSION = "1.30.0"

# Kinds that kubernetes-validate has no schema for (Prometheus Operator CRDs).
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


# ---------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------

# libyaml when PyYAML has it (10x faster than the pure-Python parser).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=_Loader) if d]


def dump_all(docs: Iterable[dict[str, Any]]) -> str:
    return "".join("---\n" + yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=120) for d in docs)


def key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


# ---------------------------------------------------------------------------------------
# Helm (helm-python-sdk)
# ---------------------------------------------------------------------------------------

def values_file(name: str) -> dict[str, Any]:
    return yaml.load((CI_VALUES / name).read_text(), Loader=_Loader) or {}


def render_chart(values: dict[str, Any] | None, *, release: str = RELEASE, namespace: str = NAMESPACE,
                 upgrade: bool = False) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` (hooks included, NOTES.txt too).

    Validates the values against values.schema.json first (as helm install does)."""
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema(values or {})
        return chart.render(values or {}, name=release, namespace=namespace,
                            is_install=not upgrade, is_upgrade=upgrade)


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(rendered):
        if path.endswith(".yaml") or path.endswith(".yml"):
            docs.extend(load_all(rendered[path]))
    return docs


def notes(rendered: dict[str, str]) -> str:
    return next((t for p, t in rendered.items() if p.endswith("NOTES.txt")), "")


def lint_chart(values: dict[str, Any] | None) -> list[str]:
    """Helm's own lint (strict: warnings fail). Returns the failures as text."""
    import helm_python as helm

    report = helm.lint(str(CHART), values or {}, strict=True, namespace=NAMESPACE,
                       kube_version="v" + KUBE_VERSION)
    failures = [f"{m.get('path')}: {m.get('error')}" for m in report.get("messages", [])
                if int(m.get("severity", 0)) >= 2]
    failures += [str(e) for e in report.get("errors", []) or []]
    return failures


# ---------------------------------------------------------------------------------------
# Kustomize
# ---------------------------------------------------------------------------------------

def kubectl() -> str | None:
    return os.environ.get("QTG_KUBECTL") or shutil.which("kubectl")


def kustomize_build(path: Path, tool: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """Builds a kustomization; returns (objects, which tool built them). `tool` (default: env
    QTG_KUSTOMIZE, else "auto") is auto | kubectl | kustomize | python."""
    tool = tool or os.environ.get("QTG_KUSTOMIZE") or "auto"
    if tool not in ("auto", "kubectl", "kustomize", "python"):
        raise ValueError(f"QTG_KUSTOMIZE={tool!r}: use auto, kubectl, kustomize or python")
    if tool in ("auto", "kubectl") and kubectl():
        out = subprocess.run([kubectl(), "kustomize", str(path)], check=True, capture_output=True, text=True)
        return load_all(out.stdout), "kubectl kustomize"
    if tool in ("auto", "kustomize") and shutil.which("kustomize"):
        out = subprocess.run(["kustomize", "build", str(path)], check=True, capture_output=True, text=True)
        return load_all(out.stdout), "kustomize build"
    if tool in ("kubectl", "kustomize"):
        raise RuntimeError(f"{tool} is not installed")
    return mini_kustomize(path), "python fallback (deploy-tests/deploylib.py mini_kustomize)"


CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PriorityClass", "StorageClass", "PersistentVolume"}


def _kustomization(path: Path) -> dict[str, Any]:
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        if (path / name).exists():
            return yaml.safe_load((path / name).read_text()) or {}
    raise FileNotFoundError(f"no kustomization in {path}")


SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "images", "patches", "labels",
             "commonAnnotations"}


def mini_kustomize(path: Path) -> list[dict[str, Any]]:
    """The subset of `kustomize build` that k8s/ uses; anything else is an error."""
    k = _kustomization(path)
    unknown = set(k) - SUPPORTED
    if unknown:
        raise ValueError(f"{path}: the python kustomize fallback does not support {sorted(unknown)}")
    objs: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        p = (path / res).resolve()
        objs.extend(mini_kustomize(p) if p.is_dir() else load_all(p.read_text()))
    for patch in k.get("patches", []):
        text = (path / patch["path"]).read_text() if "path" in patch else patch["patch"]
        for pdoc in load_all(text):
            target = patch.get("target") or {}
            kind = target.get("kind", pdoc.get("kind"))
            name = target.get("name", pdoc.get("metadata", {}).get("name"))
            hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
            if not hits:
                raise ValueError(f"{path}: patch target {kind}/{name} not found")
            for o in hits:
                body = {kk: v for kk, v in pdoc.items() if kk not in ("apiVersion", "kind")}
                body.get("metadata", {}).pop("name", None)
                _strategic_merge(o, body)
    for label in k.get("labels", []):
        for o in objs:
            o["metadata"].setdefault("labels", {}).update(label.get("pairs", {}))
    if k.get("commonAnnotations"):
        for o in objs:
            o["metadata"].setdefault("annotations", {}).update(k["commonAnnotations"])
    if "namespace" in k:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    for img in k.get("images", []):
        for o in objs:
            for c in _containers(o):
                name, _, tag = _split_image(c["image"])
                if name == img["name"]:
                    new = img.get("newName", name)
                    if img.get("digest"):
                        c["image"] = f"{new}@{img['digest']}"
                    else:
                        c["image"] = f"{new}:{img.get('newTag', tag)}" if img.get("newTag", tag) else new
    return objs


def _split_image(image: str) -> tuple[str, str, str]:
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, digest, ""
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = image.rsplit(":", 1)
        return name, "", tag
    return image, "", ""


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec", {}) if "template" in spec else None
    if obj["kind"] == "CronJob":
        pod = spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})
    if obj["kind"] == "Pod":
        pod = spec
    if not pod:
        return []
    return list(pod.get("containers", [])) + list(pod.get("initContainers", []))


def _strategic_merge(dst: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _strategic_merge(dst[k], v)
        elif (isinstance(v, list) and isinstance(dst.get(k), list) and v and all(isinstance(i, dict) and "name" in i for i in v)
              and all(isinstance(i, dict) and "name" in i for i in dst[k])):
            by_name = {i["name"]: i for i in dst[k]}
            for item in v:
                if item["name"] in by_name:
                    _strategic_merge(by_name[item["name"]], item)
                else:
                    dst[k].append(copy.deepcopy(item))
        else:
            dst[k] = copy.deepcopy(v)


# ---------------------------------------------------------------------------------------
# k8s/base = the chart's default render, less what only Helm needs
# ---------------------------------------------------------------------------------------

HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version")
HELM_ONLY_ANNOTATIONS = ("helm.sh/hook", "helm.sh/hook-weight", "helm.sh/hook-delete-policy",
                         "checksum/registry")
# Without Helm's hook the Job is a plain Job: it removes itself after a while so that the next
# `kubectl apply` (a new image tag) can create it again (a Job's pod template is immutable).
PLAIN_JOB_TTL_SECONDS = 600


def _strip(meta: dict[str, Any]) -> None:
    for k in HELM_ONLY_LABELS:
        meta.get("labels", {}).pop(k, None)
    ann = meta.get("annotations")
    if ann is not None:
        for k in HELM_ONLY_ANNOTATIONS:
            ann.pop(k, None)
        if not ann:
            meta.pop("annotations")


def to_plain(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chart's objects as plain manifests (what k8s/base holds)."""
    out = []
    for d in copy.deepcopy(docs):
        _strip(d["metadata"])
        tmpl = d.get("spec", {}).get("template")
        if isinstance(tmpl, dict) and "metadata" in tmpl:
            _strip(tmpl["metadata"])
        if d["kind"] == "Job":
            d["spec"]["ttlSecondsAfterFinished"] = PLAIN_JOB_TTL_SECONDS
        out.append(d)
    return out


def base_file_name(doc: dict[str, Any]) -> str:
    """k8s/base file of an object: <kind>-<name less the "qtg-" prefix>.yaml."""
    name = doc["metadata"]["name"]
    short = name[len(RELEASE) + 1:] if name.startswith(RELEASE + "-") else name
    return f"{doc['kind'].lower()}-{short}.yaml"
