"""The bot's Kubernetes manifests (``deploy/bot/kubernetes/``): schema, RBAC, pods, network policy.

Every manifest must pass the Kubernetes schema (kubernetes-validate, strict: unknown fields fail) and the
permissions must be exactly what the bot uses: the expected grants below are the contract,
so broadening a Role or a ClusterRole fails a test until someone changes the contract on purpose.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from bot.adapters.cluster import kube, preflight
from bot.adapters.cluster.cohort import cohort_secret
from bot.adapters.cluster.rest import RESOURCES
from bot.adapters.leader import LEASE_NAME
from bot.config import Settings, load_settings
from bot.domain.release import ReleaseManifest
from tests.deploy_support import APPLIED, BOT, KUBE, NOT_APPLIED, REPO, all_objects, manifest_docs, one_object

# EKS's standard-support versions; the oldest one we claim to support is the one validated against.
KUBERNETES_VERSION = "1.31"
BOT_NAMESPACE, BOT_SA = "kimi-ops", "kimi-ops"
SERVING_NAMESPACE = "model-serving"

# (namespace or None for cluster-scoped, apiGroup, resource, verb, resourceName or None for "any name")
Grant = tuple[str | None, str, str, str, str | None]


def _grants(
    namespace: str | None, group: str, resources: list[str], verbs: list[str], names: list[str] | None = None,
) -> set[Grant]:
    return {(namespace, group, r, v, n) for r in resources for v in verbs for n in (names or [None])}


EXPECTED_GRANTS: set[Grant] = (
    _grants(SERVING_NAMESPACE, "inference.sagemaker.aws.amazon.com", ["inferenceendpointconfigs"],
            ["get", "list", "watch", "create", "patch"])
    | _grants(SERVING_NAMESPACE, "apps", ["deployments"], ["get", "list", "watch", "create", "patch"])
    | _grants(SERVING_NAMESPACE, "", ["services", "serviceaccounts", "persistentvolumeclaims"], ["get", "create", "patch"])
    | _grants(SERVING_NAMESPACE, "policy", ["poddisruptionbudgets"], ["get", "create", "patch"])
    | _grants(SERVING_NAMESPACE, "networking.k8s.io", ["networkpolicies"], ["get", "create", "patch"])
    | _grants(SERVING_NAMESPACE, "gateway.networking.k8s.io", ["httproutes"], ["get", "create", "patch", "watch"])
    | _grants(SERVING_NAMESPACE, "monitoring.coreos.com", ["prometheusrules"], ["get", "create", "patch"])
    | _grants(SERVING_NAMESPACE, "", ["pods", "events"], ["get", "list", "watch"])
    | _grants(SERVING_NAMESPACE, "", ["services"], ["list"])
    | _grants(SERVING_NAMESPACE, "networking.k8s.io", ["ingresses", "networkpolicies"], ["list"])
    | _grants(SERVING_NAMESPACE, "gateway.networking.k8s.io", ["httproutes", "grpcroutes", "tcproutes", "tlsroutes",
                                                               "referencegrants"], ["list"])
    | _grants(SERVING_NAMESPACE, "inference.networking.k8s.io", ["inferencepools"], ["list"])
    | _grants(None, "gateway.networking.k8s.io", ["httproutes", "grpcroutes", "tcproutes", "tlsroutes"], ["list"])
    | _grants(SERVING_NAMESPACE, "inference.networking.k8s.io", ["inferencepools"], ["get", "create", "patch"])
    | _grants(SERVING_NAMESPACE, "", ["configmaps"], ["create"])
    | _grants(SERVING_NAMESPACE, "", ["secrets"], ["create"])
    | _grants(SERVING_NAMESPACE, "", ["secrets"], ["patch"], ["kimi-k3-prod-cohort"])
    | _grants(SERVING_NAMESPACE, "", ["configmaps"], ["get", "patch"], ["kimi-ops-admission-kimi-k3-prod"])
    | _grants(BOT_NAMESPACE, "coordination.k8s.io", ["leases"], ["create"])
    | _grants(BOT_NAMESPACE, "coordination.k8s.io", ["leases"], ["get", "patch"], ["kimi-ops-scheduler"])
    | _grants("hyperpod-inference-system", "apps", ["deployments"], ["get"], ["hyperpod-inference-operator-controller-manager"])
    | _grants(None, "", ["nodes"], ["get", "list"])
    | _grants(None, "", ["namespaces"], ["get"], [SERVING_NAMESPACE])
    | _grants(None, "apiextensions.k8s.io", ["customresourcedefinitions"], ["get"],
              ["inferenceendpointconfigs.inference.sagemaker.aws.amazon.com"])
    | _grants(None, "", ["persistentvolumes"], ["get", "create", "patch"])
)

# Availability drills' writes, granted only by the opt-in rbac-drills.yaml (never by kustomization.yaml).
DRILL_GRANTS: set[Grant] = (_grants(SERVING_NAMESPACE, "", ["pods"], ["delete"])
                            | _grants(None, "", ["nodes"], ["patch"]))


def _granted(objects: list[dict[str, Any]]) -> set[Grant]:
    granted: set[Grant] = set()
    for obj in objects:
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        namespace = obj["metadata"].get("namespace") if obj["kind"] == "Role" else None
        assert obj["kind"] == "ClusterRole" or namespace, f"Role {obj['metadata']['name']} has no namespace"
        for rule in obj["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{obj['metadata']['name']}: wildcard in {field}"
            assert "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                granted |= _grants(namespace, group, rule["resources"], rule["verbs"], rule.get("resourceNames"))
    return granted


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in all_objects() if o["kind"] in ("Deployment", "Job")]


def test_every_file_in_the_directory_is_accounted_for_and_kustomization_applies_exactly_the_bot() -> None:
    on_disk = sorted(p.name for p in KUBE.glob("*.yaml"))
    assert on_disk == sorted(APPLIED + NOT_APPLIED + ["kustomization.yaml"])
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    assert kustomization["resources"] == APPLIED
    deployment_image = one_object("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert [i["name"] for i in kustomization["images"]] == [deployment_image.rsplit(":", 1)[0]]


@pytest.mark.parametrize("name", APPLIED + NOT_APPLIED)
def test_manifest_passes_the_kubernetes_schema_strictly(name: str) -> None:
    docs = manifest_docs(name)
    assert docs, f"{name} holds no object"
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_a_broken_manifest() -> None:
    """Guards the test above: a misspelt field is caught, so passing means something."""
    deployment = one_object("Deployment")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_roles_grant_exactly_what_the_bot_uses_and_no_wildcards() -> None:
    granted = _granted(all_objects())
    assert granted - EXPECTED_GRANTS == set(), "granted beyond what the bot uses"
    assert EXPECTED_GRANTS - granted == set(), "the bot would be forbidden something it uses"


def test_the_opt_in_drill_roles_grant_exactly_the_drills_writes() -> None:
    assert _granted(manifest_docs("rbac-drills.yaml")) == DRILL_GRANTS
    assert "rbac-drills.yaml" not in yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"]


def test_secrets_are_never_readable() -> None:
    readable = {(g[2], g[3]) for g in EXPECTED_GRANTS}
    # The one Secret kimi-ops touches, the cohort's token, it only writes.
    assert not any(resource == "secrets" and verb in ("get", "list", "watch") for resource, verb in readable)
    assert not any(verb in ("delete", "deletecollection", "escalate", "bind", "impersonate") for _, verb in readable)


@pytest.mark.parametrize("name", ["rbac-serving.yaml", "rbac-leader.yaml", "rbac-operator.yaml", "rbac-cluster.yaml",
                                  "rbac-drills.yaml"])
def test_every_rbac_rule_says_why(name: str) -> None:
    lines = (KUBE / name).read_text().splitlines()
    rule_starts = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    assert rule_starts
    for i in rule_starts:
        assert lines[i - 1].strip().startswith("#"), f"{name}:{i + 1}: rule without a comment saying why"


def test_every_role_is_bound_to_the_bot_service_account_and_nothing_else() -> None:
    roles = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
             for o in all_objects(drills=True) if o["kind"] in ("Role", "ClusterRole")}
    bound = set()
    for obj in all_objects(drills=True):
        if obj["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = obj["roleRef"]
        namespace = obj["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], ref["name"], namespace) in roles, f"{obj['metadata']['name']} binds a role not defined here"
        assert obj["subjects"] == [{"kind": "ServiceAccount", "name": BOT_SA, "namespace": BOT_NAMESPACE}]
        bound.add((ref["kind"], ref["name"], namespace))
    assert bound == roles


@pytest.fixture()
def incluster_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings the in-cluster bot loads from its ConfigMap (the file must be valid KIMI_CONFIG)."""
    config_file = tmp_path / "kimi-ops.yaml"
    config_file.write_text(one_object("ConfigMap", "kimi-ops-config")["data"]["kimi-ops.yaml"])
    for var in ("KIMI_ENDPOINTS", "KIMI_ROLES", "KIMI_AWS_REGIONS", "KIMI_ONCALL_GROUP"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KIMI_CONFIG", str(config_file))
    settings = load_settings()
    assert settings.endpoints, "the example ConfigMap declares no endpoint"
    return settings


def _group(kind: str) -> str:
    api_version = RESOURCES[kind].api_version
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def _allowed(namespace: str | None, group: str, plural: str, verb: str, name: str) -> bool:
    return any(g[:4] == (namespace, group, plural, verb) and g[4] in (None, name) for g in EXPECTED_GRANTS)


def test_admission_configmaps_and_namespaces_cover_every_configured_endpoint(incluster_settings: Settings) -> None:
    """The Roles name each configured endpoint's namespace and admission ConfigMap, as the cluster adapter names them."""
    settings = incluster_settings
    for endpoint in settings.endpoints:
        assert _allowed(endpoint.namespace, "", "configmaps", "patch", kube.admission_configmap_name(endpoint))
        assert _allowed(endpoint.namespace, "", "configmaps", "get", kube.admission_configmap_name(endpoint))
        assert (None, "", "namespaces", "get", endpoint.namespace) in EXPECTED_GRANTS
        assert any(g[0] == endpoint.namespace and g[2] == "inferenceendpointconfigs" for g in EXPECTED_GRANTS)
        if endpoint.route is not None and endpoint.route.cohort_header.source == "token":
            assert _allowed(endpoint.namespace, "", "secrets", "patch", cohort_secret(endpoint))  # the cohort's token
    # The IAM statements for reservations are limited to the regions the bot watches.
    policy = json.loads((BOT / "iam-policy.json").read_text())
    for statement in policy["Statement"]:
        if statement["Resource"] == "*":
            assert statement["Condition"]["StringEquals"]["aws:RequestedRegion"] == settings.aws_regions


@pytest.mark.parametrize("kind", ["hyperpod", "eks"])
def test_the_bot_may_apply_every_object_it_renders(incluster_settings: Settings, kind: str) -> None:
    """Server-side apply needs get (read back), patch (apply) and create (first apply) on each rendered object."""
    release = ReleaseManifest.model_validate(
        yaml.safe_load((REPO / "deploy" / "releases" / "kimi-k3-2026-08-01.yaml").read_text()))
    endpoint = incluster_settings.endpoints[0].model_copy(update={"kind": kind})
    manifest = kube.render_manifest(release, endpoint, release.tuple_hash())
    assert manifest.objects
    for obj in manifest.objects:
        info, group = RESOURCES[obj["kind"]], _group(obj["kind"])
        namespace = obj["metadata"].get("namespace") if info.namespaced else None
        for verb in ("get", "create", "patch"):
            name = obj["metadata"]["name"]
            assert _allowed(namespace, group, info.plural, verb, name), f"cannot {verb} {obj['kind']} {name}"
    # Admission marks the endpoint object itself with an annotation, by server-side apply.
    endpoint_kind = "InferenceEndpointConfig" if kind == "hyperpod" else "Deployment"
    assert _allowed(endpoint.namespace, _group(endpoint_kind), RESOURCES[endpoint_kind].plural, "patch", endpoint.name)


def test_names_in_the_roles_are_the_names_the_code_uses() -> None:
    assert _allowed(BOT_NAMESPACE, "coordination.k8s.io", "leases", "patch", LEASE_NAME)
    assert _allowed(preflight.OPERATOR_NAMESPACE, "apps", "deployments", "get", preflight.OPERATOR_DEPLOYMENT)
    assert _allowed(None, "apiextensions.k8s.io", "customresourcedefinitions", "get", preflight.crd_name())
    # Every kind the cluster adapter talks to is granted somewhere (a new kind needs a new, commented rule).
    granted_plurals = {g[2] for g in EXPECTED_GRANTS}
    assert {k.plural for k in RESOURCES.values()} <= granted_plurals


def test_the_bot_runs_non_root_with_a_read_only_root_filesystem() -> None:
    specs = _pod_specs()
    assert {name for name, _ in specs} == {"kimi-ops", "kimi-ops-db-upgrade"}
    for name, spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False, name
            assert sc["capabilities"] == {"drop": ["ALL"]}, name
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"], name
            # Read-only root: whatever the bot writes goes to mounted volumes.
            mounts = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
            assert {"/tmp", "/var/lib/kimi-ops"} <= mounts, name
            env = {e["name"]: e for e in container["env"]}
            assert env["KIMI_DATA_DIR"]["value"] == "/var/lib/kimi-ops"
            assert env["KIMI_LOG_FORMAT"]["value"] == "json"
        assert "hostNetwork" not in spec and "hostPID" not in spec


def test_deployment_runs_socket_mode_with_two_replicas_and_credentials_from_secret_and_configmap() -> None:
    deployment = one_object("Deployment", "kimi-ops")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == BOT_SA and deployment["metadata"]["namespace"] == BOT_NAMESPACE
    (container,) = pod["containers"]
    assert container["args"][:2] == ["serve", "--socket"]
    env = {e["name"]: e for e in container["env"]}
    secret = one_object("Secret", "kimi-ops-secrets")
    for key in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "KIMI_DATABASE_URL",
                "KIMI_ALERTMANAGER_WEBHOOK_TOKEN"):
        assert "value" not in env[key], f"{key} must come from the Secret, not a literal"
        ref = env[key]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    config_path = Path(env["KIMI_CONFIG"]["value"])
    config_volume = next(v for v in pod["volumes"] if v.get("configMap"))
    mount = next(m for m in container["volumeMounts"] if m["name"] == config_volume["name"])
    assert mount["readOnly"] is True and config_path.parent == Path(mount["mountPath"])
    assert config_volume["configMap"]["name"] == one_object("ConfigMap", "kimi-ops-config")["metadata"]["name"]
    assert {"key": "kimi-ops.yaml", "path": config_path.name} in config_volume["configMap"]["items"]
    port = container["ports"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}  # the process answers
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}  # database, schema, Slack
    assert container["args"][container["args"].index("--port") + 1] == str(port["containerPort"])


def test_service_pdb_and_network_policy_select_the_bot_pods() -> None:
    labels = one_object("Deployment", "kimi-ops")["spec"]["template"]["metadata"]["labels"]
    assert one_object("Service", "kimi-ops-metrics")["spec"]["selector"].items() <= labels.items()
    assert one_object("Service", "kimi-ops-metrics")["spec"]["type"] == "ClusterIP"
    pdb = one_object("PodDisruptionBudget", "kimi-ops")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items() and pdb["spec"]["minAvailable"] == 1
    policy = one_object("NetworkPolicy", "kimi-ops")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}


def test_network_policy_allows_only_dns_https_the_model_endpoint_alertmanager_and_postgres() -> None:
    policy = one_object("NetworkPolicy", "kimi-ops")["spec"]
    allowed = set()
    for rule in policy["egress"]:
        assert rule.get("ports") and rule.get("to"), "an egress rule without ports or peers allows everything"
        allowed |= {(p["protocol"], p["port"]) for p in rule["ports"]}
    assert allowed == {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 8000), ("TCP", 9093), ("TCP", 5432)}
    for rule in policy["ingress"]:
        assert rule.get("ports") == [{"protocol": "TCP", "port": 3000}] and rule.get("from")
    open_ipblocks = [p["ipBlock"] for r in policy["egress"] for p in r["to"] if p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0"]
    assert all("169.254.0.0/16" in block.get("except", []) for block in open_ipblocks), "instance metadata must stay unreachable"


def test_secret_example_holds_only_placeholders() -> None:
    secret = one_object("Secret", "kimi-ops-secrets")
    assert "data" not in secret
    for key, value in secret["stringData"].items():
        assert "REPLACE-ME" in value, f"{key} looks like a real value"
    assert not re.search(r"xox[bpa]-\d", (KUBE / "secret.example.yaml").read_text()), "a real-looking Slack token"


def test_service_account_carries_the_irsa_role_that_trusts_exactly_it() -> None:
    sa = one_object("ServiceAccount", BOT_SA)
    role_arn = sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert re.fullmatch(r"arn:aws:iam::\d{12}:role/[\w+=,.@-]+", role_arn)
    trust = json.loads((BOT / "iam-trust-policy.json").read_text())
    (statement,) = trust["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    conditions = statement["Condition"]["StringEquals"]
    subjects = [v for k, v in conditions.items() if k.endswith(":sub")]
    assert subjects == [f"system:serviceaccount:{BOT_NAMESPACE}:{BOT_SA}"]
    assert [v for k, v in conditions.items() if k.endswith(":aud")] == ["sts.amazonaws.com"]


def test_the_pods_grace_period_covers_the_pause_and_the_workers_whole_drain() -> None:
    """At SIGTERM serve waits up to STOP_SECONDS for its worker's drain of acknowledged work; the pod must outlive it."""
    from bot.cli.worker import STOP_SECONDS
    from bot.slack.work import DRAIN_SECONDS

    pod = one_object("Deployment", "kimi-ops")["spec"]["template"]["spec"]
    [serve] = [c for c in pod["containers"] if c["name"] == "kimi-ops"]
    pause = float(serve["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert DRAIN_SECONDS < STOP_SECONDS
    assert pod["terminationGracePeriodSeconds"] >= pause + STOP_SECONDS
