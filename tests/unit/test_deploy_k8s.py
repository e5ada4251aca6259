"""Kubernetes manifests: `kubectl kustomize` renders the base and the GKE overlay, every
object passes `kubernetes-validate --strict`, custom resources (PodMonitoring) carry their
required fields, and the manifests agree with the code (settings names, metric names, the
shipped scheduling profile, least-privilege RBAC)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from services.autoscale.signals import STRATEGIES
from services.settings_doc import settings_class
from shared.settings import CommonSettings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BASE, GKE = K8S / "base", K8S / "overlays" / "gke"
# GKE's regular channel and the newest schema kubernetes-validate ships
K8S_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())
KUBECTL = shutil.which("kubectl")
SERVICES = ("gateway", "predictor", "trainer", "collector")


def _raw_objects(directory: Path) -> list[dict]:
    """Objects of the YAML files a kustomization lists (no rendering)."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    out = []
    for res in kust.get("resources", []):
        path = directory / res
        if path.is_file():
            out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


@cache
def render(directory: Path) -> tuple[dict, ...]:
    if KUBECTL is None:
        # the only skip allowed: without kubectl, fall back to the raw files (base + overlay)
        objs = _raw_objects(directory)
        if directory == GKE:
            objs += _raw_objects(BASE)
        return tuple(objs)
    out = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def by_kind(objs, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_kubectl_kustomize_renders_base_and_gke():
    if KUBECTL is None:
        print("kubectl not found on PATH: `kubectl kustomize` render check skipped")
        pytest.skip("kubectl not found on PATH; rendering check skipped (raw files validated)")
    for directory in (BASE, GKE):
        objs = render(directory)
        assert len(objs) > 10
        cms = by_kind(objs, "ConfigMap")
        assert any(n.startswith("headroom-scheduling-profile-") for n in cms)  # content hash
        assert all(o["metadata"].get("namespace") == "headroom" for o in objs
                   if o["kind"] not in ("Namespace",)), directory  # fmt: skip


def _objects_for_validation() -> list[tuple[str, dict]]:
    out = []
    for name, d in (("base", BASE), ("gke", GKE)):
        out += [(f"{name}:{o['kind']}/{o['metadata']['name']}", o) for o in render(d)]
    for f in sorted((GKE / "hpa").glob("*.yaml")):  # every example, applied or not
        out += [(f"hpa-example:{f.name}", o) for o in yaml.safe_load_all(f.read_text()) if o]
    return out


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_validates_strictly(version):
    checked, custom = 0, []
    for ident, obj in _objects_for_validation():
        if obj["apiVersion"].startswith("monitoring.googleapis.com/"):
            custom.append(ident)  # no built-in schema: checked by test_podmonitoring_*
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{ident} invalid for Kubernetes {version}: {e.message} at {list(e.path)}")
        checked += 1
    assert checked > 25 and custom


def test_kubernetes_validate_cli_strict(tmp_path):
    """The same through the `kubernetes-validate --strict` command, on the rendered overlay."""
    exe = Path(sys.executable).parent / "kubernetes-validate"
    exe = exe if exe.exists() else shutil.which("kubernetes-validate")
    assert exe, "kubernetes-validate is not installed (pip install -e '.[dev]')"
    docs = [o for o in render(GKE) if not o["apiVersion"].startswith("monitoring.googleapis")]
    f = tmp_path / "gke.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    out = subprocess.run(
        [str(exe), "--strict", "-k", K8S_VERSIONS[0], "--quiet", str(f)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


# --------------------------------------------------------------------------------------
# Custom resources
# --------------------------------------------------------------------------------------
_DURATION = re.compile(r"^((\d+)(ms|s|m|h))+$")


def test_podmonitoring_required_fields():
    objs = render(GKE)
    pms = by_kind(objs, "PodMonitoring")
    assert {"headroom-collector", "headroom-gateway", "headroom-predictor"} <= set(pms)
    workloads = list(by_kind(objs, "Deployment").values())
    for name, pm in pms.items():
        assert pm["apiVersion"] == "monitoring.googleapis.com/v1", name
        spec = pm["spec"]
        labels = spec["selector"]["matchLabels"]
        assert labels, f"{name}: empty selector"
        assert set(spec) <= {"selector", "endpoints", "targetLabels", "limits", "filterRunning"}
        assert spec["endpoints"], f"{name}: no endpoints"
        matched = [
            w for w in workloads
            if labels.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]  # fmt: skip
        assert matched, f"{name}: selector matches no Deployment"
        for ep in spec["endpoints"]:
            assert set(ep) <= {"port", "path", "scheme", "interval", "timeout", "params",
                               "metricRelabeling", "proxyUrl", "authorization", "basicAuth",
                               "oauth2", "tls"}  # fmt: skip
            assert isinstance(ep["port"], (int, str)) and ep["port"] != ""
            assert _DURATION.match(ep.get("interval", "1m")), ep
            for w in matched:
                ports = {p["name"] for c in w["spec"]["template"]["spec"]["containers"]
                         for p in c.get("ports", [])}  # fmt: skip
                assert isinstance(ep["port"], int) or ep["port"] in ports, (name, ep)
        for label in spec.get("targetLabels", {}).get("metadata", []):
            assert label in ("pod", "container", "node", "top_level_controller_name",
                             "top_level_controller_type")  # fmt: skip


# --------------------------------------------------------------------------------------
# Manifests agree with the code
# --------------------------------------------------------------------------------------
def test_hpa_examples_use_the_collectors_gauges():
    gauges = {s.name: s.gauge for s in STRATEGIES.values()}
    files = sorted((GKE / "hpa").glob("*.yaml"))
    assert len(files) == 6
    for f in files:
        server, strategy = f.stem.split("-", 1)
        assert server in ("vllm", "jetstream") and strategy in gauges, f.name
        hpa = yaml.safe_load(f.read_text())
        (metric,) = hpa["spec"]["metrics"]
        assert metric["type"] == "External"
        m = metric["external"]["metric"]
        assert m["name"] == f"prometheus.googleapis.com|{gauges[strategy]}|gauge"
        assert "metric.labels.pool" in m["selector"]["matchLabels"]
        assert metric["external"]["target"]["type"] == "Value"
        b = hpa["spec"]["behavior"]
        assert b["scaleUp"]["stabilizationWindowSeconds"] == 0
        assert b["scaleDown"]["stabilizationWindowSeconds"] == 300


def test_one_hpa_per_scale_target():
    hpas = by_kind(render(GKE), "HorizontalPodAutoscaler").values()
    targets = [h["spec"]["scaleTargetRef"]["name"] for h in hpas]
    assert len(targets) == len(set(targets)), targets


def test_predictor_scales_on_cpu_and_trainer_is_single():
    objs = render(BASE)
    hpa = by_kind(objs, "HorizontalPodAutoscaler")["predictor"]
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    deps = by_kind(objs, "Deployment")
    assert deps["predictor"]["spec"]["replicas"] >= 2
    assert deps["trainer"]["spec"]["replicas"] == 1
    assert deps["trainer"]["spec"]["strategy"]["type"] == "Recreate"
    assert set(by_kind(objs, "StatefulSet")) == {"nats", "redis"}
    nats = by_kind(objs, "StatefulSet")["nats"]["spec"]["template"]["spec"]["containers"][0]
    assert nats["args"] == ["-c", "/etc/nats/nats.conf"]
    conf = by_kind(objs, "ConfigMap")["nats-config"]["data"]["nats.conf"]
    assert "jetstream { store_dir: /data }" in conf


def test_rbac_is_least_privilege():
    """One read-only pod Role, bound to the collectors' and the gateway's ServiceAccounts
    (the gateway's pod allowlist watches the pool's pods); no other service has a token."""
    objs = render(GKE)
    (role,) = by_kind(objs, "Role").values()
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    assert not by_kind(objs, "ClusterRole") and not by_kind(objs, "ClusterRoleBinding")
    accounts = by_kind(objs, "ServiceAccount")
    assert set(accounts) == {"headroom-collector", "headroom-gateway"}
    bound = set()
    for binding in by_kind(objs, "RoleBinding").values():
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        (subject,) = binding["subjects"]
        assert subject["kind"] == "ServiceAccount" and subject["name"] in accounts
        assert subject.get("namespace", "headroom") == "headroom"
        bound.add(subject["name"])
    assert bound == set(accounts)
    for name, dep in by_kind(objs, "Deployment").items():
        pod = dep["spec"]["template"]["spec"]
        if name.startswith("collector"):
            assert pod["serviceAccountName"] == "headroom-collector"
        elif name == "gateway":
            assert pod["serviceAccountName"] == "headroom-gateway"
        else:
            assert pod["automountServiceAccountToken"] is False, name


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("directory", [BASE, GKE], ids=["base", "gke"])
def test_bus_credentials_come_from_the_secret(directory):
    """Every service connects to NATS as its own user with the password from the Secret
    headroom-bus; the Redis users (predictor, trainer) too; NATS and Redis read the same
    keys; no password is written in a manifest."""
    objs = render(directory)
    cms = by_kind(objs, "ConfigMap")
    common = cms["headroom-common"]["data"]
    for name, dep in by_kind(objs, "Deployment").items():
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        data = dict(common)
        for ref in c.get("envFrom", []):
            data.update(cms[ref["configMapRef"]["name"]].get("data") or {})
        env = _env(c)
        user = env.get("HEADROOM_NATS_USER", {}).get("value") or data.get("HEADROOM_NATS_USER")
        service = "collector" if name.startswith("collector") else name
        assert user == service, name
        ref = env["HEADROOM_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "headroom-bus", "key": f"nats-{service}-password"}, name
        if service in ("predictor", "trainer"):
            assert data["HEADROOM_REDIS_USERNAME"] == "headroom"
            ref = env["HEADROOM_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "headroom-bus", "key": "redis-password"}
        else:
            assert "HEADROOM_REDIS_PASSWORD" not in env, name
        assert not any("PASSWORD" in k or "TOKEN" in k for k in data), name
    sts = by_kind(objs, "StatefulSet")
    nats_env = _env(sts["nats"]["spec"]["template"]["spec"]["containers"][0])
    conf = cms["nats-config"]["data"]["nats.conf"]
    for service in ("gateway", "predictor", "trainer", "collector"):
        var = f"NATS_{service.upper()}_PASSWORD"
        assert f"{{ user: {service}, password: ${var} }}" in conf
        assert nats_env[var]["valueFrom"]["secretKeyRef"]["key"] == f"nats-{service}-password"
    redis = sts["redis"]["spec"]["template"]["spec"]["containers"][0]
    assert ">$(REDIS_PASSWORD)" in redis["args"] and redis["args"][5:8] == [
        "--user",
        "default",
        "off",
    ]
    assert _env(redis)["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "redis-password"
    assert not by_kind(objs, "Secret"), "credentials are created by the operator, not shipped"


def _selects(selector: dict, labels: dict) -> bool:
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        if e["operator"] == "Exists" and e["key"] not in labels:
            return False
        if e["operator"] == "In" and labels.get(e["key"]) not in e["values"]:
            return False
    return True


@pytest.mark.parametrize(
    ("directory", "model_server_labels"),
    [(BASE, {"headroom.dev/pool": "default"}), (GKE, {"app": "vllm-llama3-8b"}),
     (GKE, {"app": "jetstream-llama3-8b"})],
    ids=["base", "gke-vllm", "gke-jetstream"],
)  # fmt: skip
def test_network_policies(directory, model_server_labels):
    """Only the gateway and the collectors reach model servers; only Headroom's services
    reach NATS; only the predictors and the trainer reach Redis."""
    objs = render(directory)
    pods = {n: d["spec"]["template"]["metadata"]["labels"]
            for kind in ("Deployment", "StatefulSet") for n, d in by_kind(objs, kind).items()}  # fmt: skip
    pods["model-server"] = model_server_labels
    pols = by_kind(objs, "NetworkPolicy")

    def allowed(target: str) -> set[str]:
        """Workloads whose pods the policies selecting ``target`` let in (all if none)."""
        selecting = [p for p in pols.values() if _selects(p["spec"]["podSelector"], pods[target])]
        if not selecting:
            return set(pods)
        out = set()
        for p in selecting:
            assert p["spec"]["policyTypes"] == ["Ingress"]
            for rule in p["spec"]["ingress"]:
                for peer in rule["from"]:
                    assert set(peer) == {"podSelector"}, peer  # no namespace/IP blocks
                    out |= {n for n, lb in pods.items() if _selects(peer["podSelector"], lb)}
        return out

    collectors = {n for n in pods if n.startswith("collector")}
    assert allowed("model-server") == {"gateway"} | collectors
    assert allowed("nats") == {"gateway", "predictor", "trainer"} | collectors
    assert allowed("redis") == {"predictor", "trainer"}


def test_gateway_allowlist_follows_the_collectors_pool():
    for directory in (BASE, GKE):
        cms = by_kind(render(directory), "ConfigMap")
        gw, co = cms["headroom-gateway"]["data"], cms["headroom-collector"]["data"]
        assert (
            gw["HEADROOM_GATEWAY_POD_ALLOW_K8S_LABEL_SELECTOR"]
            == co["HEADROOM_COLLECTOR_K8S_LABEL_SELECTOR"]
        )
        assert gw["HEADROOM_GATEWAY_POD_ALLOW_K8S_PORT"] == co["HEADROOM_COLLECTOR_K8S_TARGET_PORT"]


def test_every_container_has_probes_requests_and_runs_unprivileged():
    for kind in ("Deployment", "StatefulSet"):
        for name, w in by_kind(render(GKE), kind).items():
            pod = w["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True, name
            for c in pod["containers"]:
                assert "readinessProbe" in c and "livenessProbe" in c, name
                assert {"cpu", "memory"} <= set(c["resources"]["requests"]), name
                assert c["securityContext"]["allowPrivilegeEscalation"] is False, name


def _env_keys(objs) -> dict[str, str]:
    out = {}
    for cm in by_kind(objs, "ConfigMap").values():
        for k, v in (cm.get("data") or {}).items():
            if k.startswith("HEADROOM_"):
                out[k] = v
    return out


def test_configmap_keys_are_real_settings():
    """A typo in an env name would silently be ignored (extra="ignore"): catch it here."""
    known = {f"HEADROOM_{n.upper()}" for n in CommonSettings.model_fields}
    for svc in SERVICES:
        cls = settings_class(svc)
        prefix = cls.model_config["env_prefix"].upper()
        known |= {f"{prefix}{n.upper()}" for n in cls.model_fields}
    keys = _env_keys(render(GKE))
    assert keys and not set(keys) - known, sorted(set(keys) - known)


def test_collector_configs_parse_as_settings():
    for name in ("headroom-collector", "headroom-collector-jetstream"):
        objs = render(GKE)
        data = {**by_kind(objs, "ConfigMap")["headroom-common"]["data"],
                **by_kind(objs, "ConfigMap")[name]["data"]}  # fmt: skip
        cls = settings_class("collector")
        prefix = cls.model_config["env_prefix"].upper()
        kwargs = {
            k.removeprefix(prefix).lower(): v for k, v in data.items() if k.startswith(prefix)
        }
        kwargs["pool"] = data["HEADROOM_POOL"]
        s = cls(**kwargs)
        assert s.discovery == "kubernetes" and s.k8s_label_selector


def test_scheduling_profile_is_the_shipped_one():
    shipped = ROOT / "services" / "gateway" / "scheduling" / "profiles.yaml"
    copy = BASE / "scheduling" / "profiles.yaml"
    assert copy.read_text() == shipped.read_text(), (
        "deploy/k8s/base/scheduling/profiles.yaml is stale: cp " + str(shipped.relative_to(ROOT))
        + " deploy/k8s/base/scheduling/profiles.yaml"
    )  # fmt: skip
    gw = by_kind(render(BASE), "Deployment")["gateway"]["spec"]["template"]["spec"]
    mount = gw["containers"][0]["volumeMounts"][0]["mountPath"]
    path = _env_keys(render(BASE))["HEADROOM_GATEWAY_PROFILES_PATH"]
    assert path == f"{mount}/profiles.yaml"


def _gateway_settings(objs) -> dict[str, str]:
    cms = by_kind(objs, "ConfigMap")
    return {**cms["headroom-common"]["data"], **cms["headroom-gateway"]["data"]}


def _secret_mounts(objs) -> dict[str, dict]:
    """Secret name -> (mount path, volume) of the gateway's Secret volumes."""
    pod = by_kind(objs, "Deployment")["gateway"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    out = {}
    for m in pod["containers"][0]["volumeMounts"]:
        v = volumes[m["name"]]
        if "secret" in v:
            out[v["secret"]["secretName"]] = {"path": m["mountPath"], "volume": v, "mount": m}
    return out


def _parse_gateway_settings(data: dict[str, str]):
    cls = settings_class("gateway")
    prefix = cls.model_config["env_prefix"].upper()
    kwargs = {k.removeprefix(prefix).lower(): v for k, v in data.items() if k.startswith(prefix)}
    return cls(**kwargs)  # the settings' own checks (e.g. forward + a key file is refused)


def test_gateway_mounts_the_key_secrets_and_the_components_point_at_them(tmp_path):
    base = render(BASE)
    mounts = _secret_mounts(base)
    assert set(mounts) == {"headroom-api-keys", "headroom-pod-credentials"}
    for m in mounts.values():  # optional: the base runs without keys until they exist
        assert m["volume"]["secret"]["optional"] is True and m["mount"]["readOnly"] is True
        assert m["volume"]["secret"]["defaultMode"] == 0o400
    assert "HEADROOM_GATEWAY_API_KEYS_PATH" not in _gateway_settings(base)
    if KUBECTL is None:
        pytest.skip("kubectl not found on PATH; the components need `kubectl kustomize`")
    # the GKE overlay requires keys (components/api-keys)
    gke = _gateway_settings(render(GKE))
    path = gke["HEADROOM_GATEWAY_API_KEYS_PATH"]
    assert path == f"{mounts['headroom-api-keys']['path']}/keys.yaml"
    assert _parse_gateway_settings(gke).pod_auth == "none"
    # both components over the base: the pod key file is in the pod-credentials Secret
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(BASE, tmp_path)],
        "components": [os.path.relpath(K8S / "components" / c, tmp_path)
                       for c in ("api-keys", "pod-api-key")],
    }))  # fmt: skip
    data = _gateway_settings(render(tmp_path))
    s = _parse_gateway_settings(data)
    assert s.pod_auth == "inject" and s.api_keys_path == path
    assert s.pod_api_key_file == f"{mounts['headroom-pod-credentials']['path']}/api-key"


def _sleep_s(hook: dict) -> float:
    if "sleep" in hook:
        return float(hook["sleep"]["seconds"])
    cmd = hook["exec"]["command"]
    assert cmd[0] == "sleep" and len(cmd) == 2, cmd
    return float(cmd[1])


def test_gateway_probes_and_drain_match_the_code():
    from services.gateway.app import create_app

    routes = {getattr(r, "path", None) for r in create_app(settings_class("gateway")()).api.routes}
    for directory in (BASE, GKE):
        objs = render(directory)
        pod = by_kind(objs, "Deployment")["gateway"]["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" in routes
        assert c["livenessProbe"]["httpGet"]["path"] == "/livez" in routes
        assert c["startupProbe"]["httpGet"]["path"] == "/livez"
        # the grace period covers the preStop sleep, the unready window, the drain deadline
        # and a margin for the final hand-over (samples, NATS)
        s = _parse_gateway_settings(_gateway_settings(objs))
        pre_stop = _sleep_s(c["lifecycle"]["preStop"])
        needed = pre_stop + s.drain_unready_s + s.drain_timeout_s + 5
        assert pre_stop >= 3  # time for the endpoints to drop the pod while it still serves
        assert pod["terminationGracePeriodSeconds"] >= needed, (pod, needed)
        assert pod["terminationGracePeriodSeconds"] <= needed + 30
