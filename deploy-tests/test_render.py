"""Assertions on the rendered deployment: the Helm chart with its default values
(ci/default-values.yaml) and with everything on (ci/full-values.yaml), and the kustomize base
and example overlay. Run by scripts/lint-deploy.sh:

    .qtg/venv-deploy/bin/python -m pytest deploy-tests/test_render.py
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import deploylib as d  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    tomllib = None

SECRET_VARS = {"MG_DATABASE_URL", "DATABASE_URL", "MG_CALLBACK_SECRET", "MG_API_BOOTSTRAP_ADMIN_KEY"}
ADMIN_PORT = 9090
REGISTRY_PATH = "/etc/qtg/registry.toml"


# ---------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------

def merged_values(values: dict[str, Any]) -> dict[str, Any]:
    import helm_python as helm

    with helm.Chart.load(str(d.CHART)) as chart:
        return chart.merge_values(values)


def enabled_workers(values: dict[str, Any]) -> set[str]:
    return {n for n, w in values["workers"].items() if w.get("enabled", True)}


class Render:
    def __init__(self, name: str, docs: list[dict[str, Any]], values: dict[str, Any], notes: str = ""):
        self.name, self.docs, self.values, self.notes = name, docs, values, notes

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.docs if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        hits = [o for o in self.of(kind) if o["metadata"]["name"] == name]
        assert len(hits) == 1, f"{self.name}: expected one {kind}/{name}, found {len(hits)}"
        return hits[0]

    def workers(self) -> list[dict[str, Any]]:
        """Deployments of qtg workers (not the example executor)."""
        return [o for o in self.of("Deployment")
                if o["spec"]["template"]["metadata"]["labels"].get("qtg-role") == "worker"]


def chart_render(values_name: str) -> Render:
    values = d.values_file(values_name)
    rendered = d.render_chart(values)
    return Render(f"chart:{values_name}", d.manifests(rendered), merged_values(values), d.notes(rendered))


@pytest.fixture(scope="session")
def default() -> Render:
    return chart_render("default-values.yaml")


@pytest.fixture(scope="session")
def full() -> Render:
    return chart_render("full-values.yaml")


@pytest.fixture(scope="session")
def base(default: Render) -> Render:
    docs, _ = d.kustomize_build(d.K8S / "base")
    return Render("k8s/base", docs, default.values)


@pytest.fixture(scope="session")
def overlay(default: Render) -> Render:
    docs, _ = d.kustomize_build(d.K8S / "overlays" / "example")
    return Render("k8s/overlays/example", docs, default.values)


RENDERS = ["default", "full", "base", "overlay"]


@pytest.fixture(params=RENDERS)
def render(request) -> Render:
    return request.getfixturevalue(request.param)


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(obj)
    return spec.get("containers", []) + spec.get("initContainers", [])


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names = [e["name"] for e in container.get("env", [])]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"{container['name']}: env set twice: {sorted(dupes)}"
    return {e["name"]: e for e in container.get("env", [])}


def pod_objects(r: Render) -> list[dict[str, Any]]:
    return [o for o in r.docs if o["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")]


# ---------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------

def test_one_deployment_per_enabled_worker(render: Render):
    want = enabled_workers(render.values)
    got = [o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] for o in render.workers()]
    assert sorted(got) == sorted(want), f"{render.name}: worker Deployments {sorted(got)} != enabled workers {sorted(want)}"
    for o in render.workers():
        comp = o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        assert o["metadata"]["name"].endswith("-" + comp)
        assert o["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == comp
        binary = render.values["workers"][comp]["binary"]
        (c,) = o["spec"]["template"]["spec"]["containers"]
        assert c["command"] == [f"/usr/local/bin/{binary}"], f"{render.name}/{comp}: {c['command']}"


def worker_binaries() -> set[str]:
    """The binaries of the worker table: each `services/<name>/src/main.rs` that runs
    `qtg_service::run_worker_binary("qtg-<name>")` (services/common/src/workers.rs; a Rust
    test checks the table against this chart)."""
    found = set()
    for main in (d.ROOT / "services").glob("*/src/main.rs"):
        m = re.search(r'run_worker_binary\("qtg-([a-z-]+)"\)', main.read_text())
        if m:
            found.add(m.group(1))
    return found


def test_default_workers_are_the_api_and_the_worker_table(default: Render):
    assert len(worker_binaries()) >= 7
    assert enabled_workers(default.values) == {"api"} | worker_binaries()


def test_worker_binaries_exist_in_the_workspace(default: Render):
    """Every default worker's binary (and the migration Job's) is a package of services/."""
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11+")
    packages = set()
    for cargo in (d.ROOT / "services").glob("*/Cargo.toml"):
        data = tomllib.loads(cargo.read_text())
        packages.add(data["package"]["name"])
        packages.update(b["name"] for b in data.get("bin", []))
    binaries = {w["binary"] for w in default.values["workers"].values()}
    binaries |= {default.values["migrations"]["binary"], default.values["remoteExecutorExample"]["binary"]}
    missing = binaries - packages
    assert not missing, f"binaries that no services/*/Cargo.toml builds: {sorted(missing)}"


def test_probes_on_the_admin_port(render: Render):
    for o in render.workers():
        for c in o["spec"]["template"]["spec"]["containers"]:
            where = f"{render.name}/{o['metadata']['name']}/{c['name']}"
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            assert ports.get("admin") == ADMIN_PORT, f"{where}: no admin port {ADMIN_PORT}: {ports}"
            live, ready = c.get("livenessProbe", {}), c.get("readinessProbe", {})
            assert live.get("httpGet", {}).get("path") == "/healthz", f"{where}: liveness is not /healthz"
            assert ready.get("httpGet", {}).get("path") == "/readyz", f"{where}: readiness is not /readyz"
            for probe in (live, ready):
                assert probe["httpGet"]["port"] in ("admin", ADMIN_PORT), f"{where}: probe not on the admin port"
            assert env_of(c)["MG_ADMIN_ADDR"]["value"] == f"0.0.0.0:{ADMIN_PORT}"


def test_workers_never_migrate(render: Render):
    for o in render.workers():
        for c in containers(o):
            e = env_of(c)
            assert e.get("MG_MIGRATE", {}).get("value") == "false", \
                f"{render.name}/{o['metadata']['name']}: MG_MIGRATE must be \"false\" (the Job migrates)"
            assert "--migrate-only" not in c.get("args", [])


def test_api_listens_and_is_served(render: Render):
    api = render.get("Deployment", "qtg-api")
    (c,) = pod_spec(api)["containers"]
    assert env_of(c)["MG_API_ADDR"]["value"] == "0.0.0.0:8080"
    assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
    svc = render.get("Service", "qtg-api")
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    labels = api["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "API Service selects no API pod"
    for other in render.workers():
        if other is not api:
            assert "MG_API_ADDR" not in env_of(other["spec"]["template"]["spec"]["containers"][0])


# ---------------------------------------------------------------------------------------
# Security
# ---------------------------------------------------------------------------------------

def test_security_context(render: Render):
    objs = pod_objects(render)
    assert objs
    for o in objs:
        pod = pod_spec(o)
        psc = pod.get("securityContext", {})
        assert pod.get("automountServiceAccountToken") is False, f"{render.name}/{o['metadata']['name']}: token mounted"
        for c in containers(o):
            where = f"{render.name}/{o['kind']}/{o['metadata']['name']}/{c['name']}"
            sc = c.get("securityContext", {})
            eff = lambda k: sc.get(k, psc.get(k))  # noqa: E731
            assert eff("runAsNonRoot") is True, f"{where}: runAsNonRoot"
            assert eff("runAsUser") == 65532, f"{where}: runAsUser"
            assert sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem"
            assert sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation"
            assert "ALL" in sc.get("capabilities", {}).get("drop", []), f"{where}: capabilities drop ALL"
            assert not sc.get("capabilities", {}).get("add"), f"{where}: capabilities added"
            assert (eff("seccompProfile") or {}).get("type") == "RuntimeDefault", f"{where}: seccompProfile"
            assert not sc.get("privileged"), f"{where}: privileged"


def test_no_secret_values_anywhere(render: Render):
    assert not render.of("Secret"), f"{render.name}: the deployment must not carry Secret objects"
    tokens = set(render.values["secrets"].get("executorTokens") or {})
    for o in pod_objects(render):
        for c in containers(o):
            for name, e in env_of(c).items():
                where = f"{render.name}/{o['metadata']['name']}/{c['name']}: {name}"
                if name in SECRET_VARS or name in tokens or name.endswith(("_TOKEN", "_SECRET", "_KEY")):
                    assert "value" not in e, f"{where} has a literal value"
                    assert "secretKeyRef" in e.get("valueFrom", {}), f"{where} is not from a secretKeyRef"
                    assert e["valueFrom"]["secretKeyRef"]["name"] == "qtg-secrets"
                value = str(e.get("value", ""))
                assert not re.search(r"postgres(ql)?://", value), f"{where}: a database URL as a value"
    for o in render.of("ConfigMap"):
        for k, v in (o.get("data") or {}).items():
            assert not re.search(r"postgres(ql)?://\S*:\S*@", v), f"{render.name}: credentials in ConfigMap {k}"


def test_secrets_reach_the_workers_that_need_them(render: Render):
    for o in render.workers():
        (c,) = pod_spec(o)["containers"]
        e = env_of(c)
        assert e["MG_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "MG_DATABASE_URL"
    api = env_of(pod_spec(render.get("Deployment", "qtg-api"))["containers"][0])
    assert api["MG_API_BOOTSTRAP_ADMIN_KEY"]["valueFrom"]["secretKeyRef"].get("optional") is True
    cb = env_of(pod_spec(render.get("Deployment", "qtg-callback"))["containers"][0])
    assert "secretKeyRef" in cb["MG_CALLBACK_SECRET"]["valueFrom"]


def test_api_and_callback_worker_agree_on_callback_urls(render: Render):
    """The API checks a callback URL at creation, the callback worker again at delivery."""
    api = env_of(pod_spec(render.get("Deployment", "qtg-api"))["containers"][0])
    cb = env_of(pod_spec(render.get("Deployment", "qtg-callback"))["containers"][0])
    for var in ("MG_CALLBACK_ALLOW_PRIVATE", "MG_CALLBACK_ALLOWED_HOSTS"):
        assert api.get(var) == cb.get(var), f"{render.name}: {var} differs between qtg-api and qtg-callback"


# ---------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------

def registry_text(r: Render) -> str:
    return r.get("ConfigMap", "qtg-registry")["data"]["registry.toml"]


def test_registry_configmap_is_mounted(render: Render):
    text = registry_text(render)
    if tomllib is not None:
        reg = tomllib.loads(text)
        assert reg.get("executors"), f"{render.name}: the registry has no executors"
    for o in render.workers():
        pod = pod_spec(o)
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        (c,) = pod["containers"]
        assert env_of(c)["MG_EXECUTOR_REGISTRY"]["value"] == REGISTRY_PATH
        found = False
        for m in c.get("volumeMounts", []):
            cm = vols.get(m["name"], {}).get("configMap")
            if not cm or cm["name"] != "qtg-registry":
                continue
            items = {i["key"]: i["path"] for i in cm.get("items", [])} or {"registry.toml": "registry.toml"}
            if m.get("subPath"):
                found |= m["mountPath"] == REGISTRY_PATH and m["subPath"] in items.values()
            else:
                found |= f"{m['mountPath'].rstrip('/')}/{items.get('registry.toml')}" == REGISTRY_PATH
            assert m.get("readOnly") is True
        assert found, f"{render.name}/{o['metadata']['name']}: qtg-registry is not mounted at {REGISTRY_PATH}"


def test_registry_auth_env_is_provided(render: Render):
    """Each binary builds the registry at start and refuses a missing bearer_env/hmac_env."""
    names = set(re.findall(r'(?:bearer_env|hmac_env)\s*=\s*"([^"]+)"', registry_text(render)))
    for o in render.workers():
        e = env_of(pod_spec(o)["containers"][0])
        for n in names:
            assert n in e and "secretKeyRef" in e[n].get("valueFrom", {}), \
                f"{render.name}/{o['metadata']['name']}: registry needs {n} from the Secret"


def test_registry_change_rolls_the_pods(default: Render):
    import hashlib

    values = d.values_file("default-values.yaml")
    values["executorRegistry"] = '[executors."x"]\ntransport = "local"\nimpl = "sim"\n'
    other = d.manifests(d.render_chart(values))
    a = {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"]["checksum/registry"] for o in default.workers()}
    b = {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"]["checksum/registry"]
         for o in other if o["kind"] == "Deployment"}
    assert all(a[k] != b[k] for k in a)
    assert set(a.values()) == {hashlib.sha256(registry_text(default).encode()).hexdigest()}


# ---------------------------------------------------------------------------------------
# Migration Job
# ---------------------------------------------------------------------------------------

def test_migration_job_is_a_pre_install_pre_upgrade_hook(default: Render, full: Render):
    for r in (default, full):
        job = r.get("Job", "qtg-migrate")
        ann = job["metadata"]["annotations"]
        assert set(ann["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
        assert "helm.sh/hook-weight" in ann
        assert "before-hook-creation" in ann["helm.sh/hook-delete-policy"]
        (c,) = pod_spec(job)["containers"]
        assert c["command"] == ["/usr/local/bin/qtg-api"] and c["args"] == ["--migrate-only"]
        assert pod_spec(job)["restartPolicy"] == "Never"
        e = env_of(c)
        assert set(e) & SECRET_VARS == {"MG_DATABASE_URL"}, "the Job gets the database URL and no other secret"
        # The hook runs before the release's own objects exist: it may not need them.
        assert "serviceAccountName" not in pod_spec(job) or pod_spec(job)["serviceAccountName"] != "qtg"
        assert not [v for v in pod_spec(job).get("volumes", []) if "configMap" in v]
    # Its NetworkPolicy exists before it runs.
    np = default.get("NetworkPolicy", "qtg-migrate")
    assert np["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(np["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        default.get("Job", "qtg-migrate")["metadata"]["annotations"]["helm.sh/hook-weight"])
    # Nothing else is a hook: the workers start only after the Job succeeded.
    hooks = [d.key(o) for o in default.docs if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    assert sorted(hooks) == [("Job", "qtg-migrate"), ("NetworkPolicy", "qtg-migrate")]


def test_plain_migration_job(base: Render):
    job = base.get("Job", "qtg-migrate")
    assert not any(k.startswith("helm.sh/") for k in (job["metadata"].get("annotations") or {}))
    assert job["spec"]["ttlSecondsAfterFinished"] > 0


# ---------------------------------------------------------------------------------------
# NetworkPolicy, PDB, HPA, monitoring
# ---------------------------------------------------------------------------------------

def egress_ports(np: dict[str, Any], cidr: str) -> set[int]:
    ports = set()
    for rule in np["spec"].get("egress", []):
        if any(p.get("ipBlock", {}).get("cidr") == cidr for p in rule.get("to", [])):
            ports |= {p["port"] for p in rule.get("ports", [])}
    return ports


def test_network_policies(render: Render):
    comps = enabled_workers(render.values)
    nps = {o["metadata"]["name"]: o for o in render.of("NetworkPolicy")}
    for comp in comps:
        np = nps[f"qtg-{comp}"]
        assert set(np["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        assert np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == comp
        ingress_ports = {p["port"] for rule in np["spec"]["ingress"] for p in rule["ports"]}
        expected = {"admin", "http"} if render.values["workers"][comp].get("http", {}).get("enabled") else {"admin"}
        assert ingress_ports == expected, f"{render.name}/{comp}: ingress on {ingress_ports}"
        admin_rule = next(r for r in np["spec"]["ingress"] if r["ports"][0]["port"] == "admin")
        assert admin_rule.get("from"), f"{render.name}/{comp}: admin port open to everyone"
        egress = np["spec"]["egress"]
        assert any(p["port"] == 53 and p["protocol"] == "UDP" for r in egress for p in r["ports"]), "no DNS"
        assert any(p["port"] == 5432 for r in egress for p in r["ports"]), "no PostgreSQL"
        callbacks = egress_ports(np, "0.0.0.0/0") & {80, 443}
        wants_cb = render.values["workers"][comp].get("egress", {}).get("callbacks", False)
        assert bool(callbacks) == wants_cb, f"{render.name}/{comp}: callback egress {callbacks}"
    assert render.values["workers"]["callback"]["egress"]["callbacks"] is True
    assert egress_ports(nps["qtg-callback"], "0.0.0.0/0") >= {80, 443}


SMTP_PORTS = {25, 465, 587}


def smtp_rules(np: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in np["spec"].get("egress", []) if {p["port"] for p in r.get("ports", [])} & SMTP_PORTS]


def test_smtp_egress_is_opt_in(render: Render):
    """notification_dispatcher's e-mail: SMTP ports only for workers with egress.smtp, and only
    once networkPolicy.smtp names a relay (the default opens nothing)."""
    smtp = render.values["networkPolicy"]["smtp"]
    relay = bool(smtp["cidrs"] or smtp["to"])
    for np in render.of("NetworkPolicy"):
        comp = np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        wants = relay and render.values["workers"].get(comp, {}).get("egress", {}).get("smtp", False)
        rules = smtp_rules(np)
        assert bool(rules) == wants, f"{render.name}/{comp}: SMTP egress {rules}"
        for r in rules:
            assert {p["port"] for p in r["ports"]} == set(smtp["ports"]), r
            assert "0.0.0.0/0" not in {p.get("ipBlock", {}).get("cidr") for p in r["to"]}, r
    assert render.values["workers"]["callback"]["egress"]["smtp"] is True


def test_smtp_egress_reaches_the_named_relay(default: Render, full: Render):
    assert not smtp_rules(default.get("NetworkPolicy", "qtg-callback")), "SMTP is closed by default"
    (rule,) = smtp_rules(full.get("NetworkPolicy", "qtg-callback"))
    assert rule["to"] == [{"ipBlock": {"cidr": "10.40.0.25/32"}}]
    assert not smtp_rules(full.get("NetworkPolicy", "qtg-dispatcher"))
    # A relay named by a NetworkPolicyPeer; a worker may opt in or out.
    v = d.values_file("default-values.yaml")
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mail"}}}
    v["networkPolicy"] = {"smtp": {"to": [peer], "ports": [587]}}
    v["workers"] = {"callback": {"egress": {"smtp": False}}, "health": {"egress": {"smtp": True}}}
    nps = {o["metadata"]["name"]: o for o in d.manifests(d.render_chart(v)) if o["kind"] == "NetworkPolicy"}
    assert not smtp_rules(nps["qtg-callback"])
    (rule,) = smtp_rules(nps["qtg-health"])
    assert rule["to"] == [peer] and rule["ports"] == [{"port": 587, "protocol": "TCP"}]
    v["networkPolicy"] = {"smtp": {"cidrs": ["10.40.0.25/32"], "ports": []}}
    refused(v)


def test_pdbs(render: Render):
    pdbs = {o["metadata"]["name"]: o for o in render.of("PodDisruptionBudget")}
    for o in render.workers():
        comp = o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        w = render.values["workers"][comp]
        replicas = o["spec"].get("replicas", w.get("autoscaling", {}).get("minReplicas", 1))
        flag = (w.get("pdb") or {}).get("enabled")
        want = flag if flag is not None else replicas > 1
        assert (o["metadata"]["name"] in pdbs) == want, f"{render.name}/{comp}: PDB wanted={want}"
        if want:
            sel = pdbs[o["metadata"]["name"]]["spec"]["selector"]["matchLabels"]
            assert sel == o["spec"]["selector"]["matchLabels"]


def test_full_render_has_everything(full: Render):
    kinds = {o["kind"] for o in full.docs}
    assert {"Ingress", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule",
            "NetworkPolicy"} <= kinds
    for hpa in full.of("HorizontalPodAutoscaler"):
        assert hpa["apiVersion"] == "autoscaling/v2"
        dep = full.get("Deployment", hpa["spec"]["scaleTargetRef"]["name"])
        assert "replicas" not in dep["spec"], "an autoscaled Deployment must leave replicas to the HPA"
    ing = full.get("Ingress", "qtg-api")
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "qtg-api", "port": {"name": "http"}}
    api_np = full.get("NetworkPolicy", "qtg-api")
    http_rule = next(r for r in api_np["spec"]["ingress"] if r["ports"][0]["port"] == "http")
    assert http_rule["from"], "apiFrom narrows the API's sources"
    # The next worker is a few lines of values.
    reaper = full.get("Deployment", "qtg-reaper")
    assert pod_spec(reaper)["containers"][0]["command"] == ["/usr/local/bin/qtg-reaper"]
    # The example executor, wired into the registry, reachable from workers that call executors.
    ex_svc = full.get("Service", "qtg-remote-executor-example")
    assert f"http://{ex_svc['metadata']['name']}:50051" in registry_text(full)
    disp_np = full.get("NetworkPolicy", "qtg-dispatcher")
    assert any(p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")
               == "remote-executor-example" for r in disp_np["spec"]["egress"] for p in r.get("to", []))
    ex = full.get("Deployment", "qtg-remote-executor-example")
    ex_env = env_of(pod_spec(ex)["containers"][0])
    assert "secretKeyRef" in ex_env["EXAMPLE_BEARER_TOKEN"]["valueFrom"]
    # OTLP on every worker.
    for o in full.workers():
        e = env_of(pod_spec(o)["containers"][0])
        assert e["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"].startswith("http")
        assert e["OTEL_SERVICE_NAME"]["value"] == pod_spec(o)["containers"][0]["command"][0].rsplit("/", 1)[1]


def test_monitoring(full: Render, default: Render):
    assert not default.of("ServiceMonitor") and not default.of("PrometheusRule"), "monitoring CRDs are opt-in"
    sm = full.get("ServiceMonitor", "qtg")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    svc = full.get("Service", "qtg-metrics")
    assert all(sm["spec"]["selector"]["matchLabels"].get(k) == v for k, v in svc["metadata"]["labels"].items()
               if k in sm["spec"]["selector"]["matchLabels"])
    assert svc["spec"]["selector"]["qtg-role"] == "worker"
    rule = full.get("PrometheusRule", "qtg")
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    base = full.values["metrics"]["prometheusRule"]["runbookBaseUrl"].rstrip("/")
    for metric in ("qtg_oldest_unknown_node_age_seconds", "qtg_oldest_stale_submitting_node_age_seconds",
                   "qtg_oldest_manual_intervention_age_seconds", "qtg_callback_dlq_size",
                   "qtg_worker_heartbeat_age_seconds", "qtg_worker_consecutive_errors"):
        hits = [r for r in rules if metric in r["expr"]]
        assert hits, f"no alert on {metric}"
        for r in hits:
            url = r["annotations"]["runbook_url"]
            assert url.startswith(base + "#") and len(url) > len(base) + 1, f"{r['alert']}: runbook_url {url}"
            assert r["labels"]["severity"] in ("critical", "warning")
    dash = full.get("ConfigMap", "qtg-dashboard")
    json.loads(dash["data"]["qtg.json"])


# Alerts on the workers' event metrics: name -> (values key, metric, a fragment of the expression).
EVENT_ALERTS = {
    "QtgExecutorCallsFailing": ("executorCallErrors", "qtg_executor_call_duration_seconds_count", 'outcome!="ok"'),
    "QtgExecutorSubmitSlow": ("executorSubmitLatency", "qtg_executor_call_duration_seconds_bucket", 'method="submit"'),
    "QtgCallbacksDeadLettering": ("callbackDeadLettering", "qtg_callback_deliveries_total", 'outcome="dlq"'),
    "QtgNodesGoingUnknown": ("unknownTransitions", "qtg_node_transitions_total", 'to="UNKNOWN"'),
    "QtgReadyNodeNotDispatched": ("readyNodeWaiting", "qtg_oldest_ready_node_age_seconds", "by (executor_key)"),
    "QtgObservingNodeStuck": ("observingNode", "qtg_oldest_observing_node_age_seconds", "max("),
}


def alert_rules(r: Render) -> dict[str, dict[str, Any]]:
    rule = r.get("PrometheusRule", "qtg")
    rules = [x for g in rule["spec"]["groups"] for x in g["rules"]]
    names = [x["alert"] for x in rules]
    assert len(names) == len(set(names)), f"{r.name}: an alert defined twice: {names}"
    return {x["alert"]: x for x in rules}


def test_event_metric_alerts(full: Render):
    rules = alert_rules(full)
    pr = full.values["metrics"]["prometheusRule"]
    base = pr["runbookBaseUrl"].rstrip("/")
    for name, (key, metric, fragment) in EVENT_ALERTS.items():
        assert name in rules, f"no alert {name}"
        r, a = rules[name], pr["alerts"][key]
        assert metric in r["expr"] and fragment in r["expr"], f"{name}: {r['expr']}"
        assert r["expr"].endswith(f" {a['threshold']}"), f"{name}: threshold {a['threshold']} not in {r['expr']}"
        assert "namespace=" in r["expr"] and "%" not in r["expr"], f"{name}: {r['expr']}"
        assert r["for"] == a["for"] and r["labels"]["severity"] == a["severity"]
        assert r["labels"].get("team") == "payments", f"{name}: alertLabels not applied"
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        assert r["annotations"]["runbook_url"] == f"{base}#{a['anchor']}", f"{name}: {r['annotations']['runbook_url']}"
    assert rules["QtgExecutorCallsFailing"]["expr"].count("sum by (method)") == 2
    assert rules["QtgExecutorCallsFailing"]["expr"].count("[10m]") == 2
    assert "histogram_quantile(0.99," in rules["QtgExecutorSubmitSlow"]["expr"]
    for name in ("QtgCallbacksDeadLettering", "QtgNodesGoingUnknown"):
        assert "increase(" in rules[name]["expr"] and "[15m]" in rules[name]["expr"]
    anchors = [a["anchor"] for a in pr["alerts"].values()]
    assert len(anchors) == len(set(anchors)), f"two alerts share a runbook anchor: {anchors}"


def test_event_metric_alerts_are_switchable():
    values = d.values_file("full-values.yaml")
    alerts = values["metrics"]["prometheusRule"].setdefault("alerts", {})
    alerts["executorCallErrors"] = {"enabled": False}
    alerts["unknownTransitions"] = {"threshold": 12, "for": "5m", "severity": "warning", "anchor": "x"}
    docs = d.manifests(d.render_chart(values))
    (rule,) = [o for o in docs if o["kind"] == "PrometheusRule"]
    rules = {x["alert"]: x for g in rule["spec"]["groups"] for x in g["rules"]}
    assert "QtgExecutorCallsFailing" not in rules
    assert {"QtgExecutorSubmitSlow", "QtgCallbacksDeadLettering", "QtgNodesGoingUnknown"} <= set(rules)
    r = rules["QtgNodesGoingUnknown"]
    assert r["expr"].endswith("> 12") and r["for"] == "5m" and r["labels"]["severity"] == "warning"
    assert r["annotations"]["runbook_url"].endswith("#x")


def test_dashboard():
    dash = json.loads((d.CHART / "dashboards" / "qtg.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p.get("targets", []))
    for metric in ("qtg_worker_items_processed_total", "qtg_worker_tick_duration_seconds_bucket",
                   "qtg_worker_tick_errors_total", "qtg_worker_consecutive_errors",
                   "qtg_oldest_unknown_node_age_seconds", "qtg_oldest_stale_submitting_node_age_seconds",
                   "qtg_oldest_manual_intervention_age_seconds", "qtg_callback_dlq_size",
                   "qtg_worker_heartbeat_age_seconds",
                   # The workers' event metrics.
                   "qtg_executor_call_duration_seconds_count", "qtg_executor_call_duration_seconds_bucket",
                   "qtg_node_transitions_total", "qtg_claim_misses_total", "qtg_callback_deliveries_total"):
        assert metric in exprs, f"dashboard has no panel on {metric}"
    for p in dash["panels"]:
        for t in p.get("targets", []):
            assert 'namespace=~"$namespace"' in t["expr"], f"panel {p['id']}: {t['expr']} ignores $namespace"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_notes(default: Render):
    n = default.notes
    assert "port-forward svc/qtg-api" in n
    assert "/v3/api-keys" in n and "MG_API_BOOTSTRAP_ADMIN_KEY" in n


# ---------------------------------------------------------------------------------------
# The database (docs/architecture.md §16)
# ---------------------------------------------------------------------------------------

DB_ENV = ("MG_DB_REQUIRE_SYNC_REPLICATION", "MG_DB_SESSION_CHECK")


def qtg_containers(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every container that runs a qtg binary against the database: the workers and the Job."""
    out = []
    for o in docs:
        if o["kind"] == "Deployment" and o["spec"]["template"]["metadata"]["labels"].get("qtg-role") == "worker" \
                or o["kind"] == "Job":
            out.extend((o["metadata"]["name"], c) for c in pod_spec(o)["containers"])
    return out


def db_env(docs: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """name -> (MG_DB_REQUIRE_SYNC_REPLICATION, MG_DB_SESSION_CHECK) of every qtg container."""
    out = {}
    for name, c in qtg_containers(docs):
        e = env_of(c)
        for var in DB_ENV:
            assert var in e, f"{name}/{c['name']}: no {var}"
            assert "value" in e[var], f"{name}/{c['name']}: {var} is not a plain value"
        out[name] = (e[DB_ENV[0]]["value"], e[DB_ENV[1]]["value"])
    return out


def test_database_checks_reach_every_qtg_container(render: Render):
    db = render.values["database"]
    want = ("true" if db["requireSyncReplication"] else "false", db["sessionCheck"])
    got = db_env(render.docs)
    assert "qtg-migrate" in got and len(got) == len(render.workers()) + 1, sorted(got)
    assert set(got.values()) == {want}, f"{render.name}: {got}"


def test_database_defaults(default: Render, full: Render):
    assert set(db_env(default.docs).values()) == {("false", "refuse")}
    # The production setting, in the full render.
    assert set(db_env(full.docs).values()) == {("true", "refuse")}
    assert "database.requireSyncReplication is false" in default.notes
    assert "requireSyncReplication is false" not in full.notes
    assert "sessionCheck is warn" not in default.notes


def test_database_values_flow_to_every_worker():
    values = d.values_file("default-values.yaml")
    values["database"] = {"requireSyncReplication": True, "sessionCheck": "warn"}
    rendered = d.render_chart(values)
    got = db_env(d.manifests(rendered))
    assert len(got) >= 13 and set(got.values()) == {("true", "warn")}, got
    notes = d.notes(rendered)
    assert "requireSyncReplication is false" not in notes and "sessionCheck is warn" in notes
    # A value left out keeps its default.
    values["database"] = {"sessionCheck": "warn"}
    assert set(db_env(d.manifests(d.render_chart(values))).values()) == {("false", "warn")}


def test_database_values_are_validated():
    ok = d.values_file("default-values.yaml")
    for bad in ({"sessionCheck": "maybe"}, {"sessionCheck": ""}, {"requireSyncReplication": "true"},
                {"requireSyncReplication": "yes"}, {"requireSyncReplication": 1}, {"requireSync": True}):
        v = copy.deepcopy(ok)
        v["database"] = bad
        refused(v)
    # The two variables come from `database` only: never twice, never contradicting it.
    for var in DB_ENV:
        v = copy.deepcopy(ok)
        v["env"] = {var: "warn"}
        refused(v)
        v = copy.deepcopy(ok)
        v["workers"] = {"dispatcher": {"env": {var: "true"}}}
        refused(v)
        v = copy.deepcopy(ok)
        v["migrations"] = {"env": {var: "true"}}
        refused(v)


CNPG_EXAMPLE = d.ROOT / "deploy" / "cnpg-cluster.yaml"


def cnpg_example() -> dict[str, dict[str, Any]]:
    docs = d.load_all(CNPG_EXAMPLE.read_text())
    by_kind = {o["kind"]: o for o in docs}
    assert len(by_kind) == len(docs) == 2, [o["kind"] for o in docs]
    for o in docs:
        assert o["apiVersion"] == "postgresql.cnpg.io/v1"
    return by_kind


def test_cnpg_cluster_replicates_synchronously():
    cluster = cnpg_example()["Cluster"]
    spec = cluster["spec"]
    assert spec["instances"] >= 2, "a standby to fail over to"
    sync = spec["postgresql"]["synchronous"]
    assert sync["method"] in ("any", "first")
    assert sync["number"] >= 1 and sync["number"] <= spec["instances"] - 1
    assert sync["dataDurability"] == "required", "a commit is never acknowledged without a synchronous standby"
    assert "minSyncReplicas" not in spec and "maxSyncReplicas" not in spec, "the legacy stanza excludes `synchronous`"
    assert spec["postgresql"].get("parameters", {}).get("synchronous_commit", "on") in ("on", "remote_apply")


def test_cnpg_cluster_sets_the_session_limits_on_the_role():
    cluster = cnpg_example()["Cluster"]
    initdb = cluster["spec"]["bootstrap"]["initdb"]
    assert initdb["database"] == "qtg" and initdb["owner"] == "qtg"
    sql = " ".join(initdb["postInitApplicationSQL"])
    # The values qtg asks by default (MG_DB_LOCK_TIMEOUT_MS 5000, idle-in-transaction 50 s):
    # a role value above them is "weaker" and refused behind a pooler.
    for setting, value in (("lock_timeout", "'5s'"), ("idle_in_transaction_session_timeout", "'50s'"),
                           ("synchronous_commit", "on")):
        assert re.search(rf"ALTER ROLE {initdb['owner']} SET {setting} = {value}(\s|$)", sql), f"no {setting} on the role"


def default_connection_demand(default: Render) -> int:
    """Server connections the default install may hold: (MG_DB_POOL_SIZE 8 + 1 listener) per
    process, over every replica, a surge pod per worker while rolling, and the Job."""
    assert "MG_DB_POOL_SIZE" not in default.values["env"]
    workers = [o for o in default.workers()]
    pods = sum(o["spec"]["replicas"] for o in workers) + len(workers) + 1
    return (8 + 1) * pods


def test_cnpg_pooler_is_session_mode_and_sized(default: Render):
    example = cnpg_example()
    pooler, cluster = example["Pooler"], example["Cluster"]
    spec = pooler["spec"]
    assert spec["cluster"]["name"] == cluster["metadata"]["name"] != pooler["metadata"]["name"]
    assert spec["type"] == "rw", "through the -rw Service: always the primary"
    assert spec["pgbouncer"]["poolMode"] == "session", "transaction pooling breaks qtg"
    params = spec["pgbouncer"]["parameters"]
    assert all(isinstance(v, str) for v in params.values()), "CNPG takes PgBouncer parameters as strings"
    ignored = {p.strip() for p in params["ignore_startup_parameters"].split(",")}
    assert {"extra_float_digits", "options"} <= ignored
    demand = default_connection_demand(default)
    pool = int(params["default_pool_size"])
    assert pool >= demand, f"default_pool_size {pool} < the default install's {demand} connections"
    max_connections = int(cluster["spec"]["postgresql"]["parameters"]["max_connections"])
    assert max_connections >= spec["instances"] * pool and max_connections >= demand


def test_deployment_doc_covers_ha():
    doc = (d.ROOT / "docs" / "deployment.md").read_text()
    assert "## PostgreSQL for high availability" in doc
    for needle in ("deploy/cnpg-cluster.yaml", "-rw", "database.requireSyncReplication", "ignore_startup_parameters",
                   "architecture.md#16-durability-and-failover", "qtg_db_synchronous_replication"):
        assert needle in doc, f"docs/deployment.md does not mention {needle}"
    values = (d.CHART / "values.yaml").read_text()
    assert "-rw" in values and "deploy/cnpg-cluster.yaml" in values


# ---------------------------------------------------------------------------------------
# Values the chart refuses
# ---------------------------------------------------------------------------------------

def refused(values: dict[str, Any]) -> str:
    try:
        d.render_chart(values)
    except Exception as e:  # HelmValuesError (schema) or HelmRenderError (template)
        return str(e)
    raise AssertionError(f"rendered although it should not: {values}")


def test_existing_secret_is_required():
    assert "secrets.existingSecret is required" in refused({})


def test_secrets_cannot_be_values():
    ok = d.values_file("default-values.yaml")
    for var in sorted(SECRET_VARS):
        v = copy.deepcopy(ok)
        v["env"] = {var: "postgres://u:p@db/qtg"}
        assert "invalid propertyName" in refused(v) or "is a secret" in refused(v)
        v = copy.deepcopy(ok)
        v["workers"] = {"dispatcher": {"env": {var: "x"}}}
        refused(v)


def test_schema_is_strict():
    ok = d.values_file("default-values.yaml")
    for bad in ({"workers": {"api": {"replicaz": 2}}}, {"imagee": {}}, {"networkPolicy": {"enable": True}},
                {"workers": {"new": {"enabled": True}}}):
        v = copy.deepcopy(ok)
        v.update(bad)
        refused(v)


def test_all_in_one_excludes_split_workers():
    v = d.values_file("default-values.yaml")
    v["workers"] = {"all-in-one": {"enabled": True}}
    assert "disable the others" in refused(v)
    chart_workers = yaml.safe_load((d.CHART / "values.yaml").read_text())["workers"]
    only = {n: {"enabled": n == "all-in-one"} for n in chart_workers}
    v["workers"] = only
    docs = d.manifests(d.render_chart(v))
    deps = [o["metadata"]["name"] for o in docs if o["kind"] == "Deployment"]
    assert deps == ["qtg-all-in-one"]
    svc = next(o for o in docs if o["kind"] == "Service")
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "all-in-one"


# ---------------------------------------------------------------------------------------
# k8s/ in step with the chart
# ---------------------------------------------------------------------------------------

def canonical(docs: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    return {d.key(o): json.dumps(o, sort_keys=True) for o in docs}


def test_k8s_base_is_the_chart_default_render(default: Render, base: Render):
    want = canonical(d.to_plain([o for o in default.docs]))
    got = canonical(base.docs)
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    assert not (missing or extra or changed), (
        f"k8s/base is out of step with the chart (missing {missing}, extra {extra}, changed {changed}); "
        "run: .qtg/venv-deploy/bin/python deploy-tests/sync_k8s_base.py")


def test_python_kustomize_fallback_matches_kubectl():
    if not d.kubectl():
        pytest.skip("kubectl is not installed: only the python fallback renders k8s/")
    for path in (d.K8S / "base", d.K8S / "overlays" / "example"):
        real, _ = d.kustomize_build(path, "kubectl")
        assert canonical(d.mini_kustomize(path)) == canonical(real), f"python kustomize differs from kubectl on {path}"


def test_overlay(overlay: Render):
    k = yaml.safe_load((d.K8S / "overlays" / "example" / "kustomization.yaml").read_text())
    ns = k["namespace"]
    assert overlay.get("Namespace", ns)
    for o in overlay.docs:
        if o["kind"] != "Namespace":
            assert o["metadata"].get("namespace") == ns, f"{d.key(o)} outside {ns}"
    (img,) = k["images"]
    for o in pod_objects(overlay):
        for c in containers(o):
            assert c["image"] == f"{img['name']}:{img['newTag']}"
    patch = d.load_all((d.K8S / "overlays" / "example" / "replicas.yaml").read_text())
    for p in patch:
        assert overlay.get("Deployment", p["metadata"]["name"])["spec"]["replicas"] == p["spec"]["replicas"]


# ---------------------------------------------------------------------------------------
# Image
# ---------------------------------------------------------------------------------------

def test_dockerfile():
    text = (d.ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M | re.I)
    assert froms[0] == ("rust:1.95-bookworm", "builder"), froms
    assert froms[-1][0].startswith("gcr.io/distroless/cc-debian12") and froms[-1][0].endswith(":nonroot")
    assert re.search(r"cargo build --release --locked --workspace --bins", text)
    assert re.search(r"^USER 65532(:65532)?$", text, re.M)
    assert "/usr/local/bin/" in text
    ignore = {line.strip().strip("/") for line in (d.ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert {"target", ".git", ".qtg"} <= ignore
