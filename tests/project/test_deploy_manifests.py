"""The bot's own deployment (``deploy/bot/``): image, Kubernetes manifests and IAM policy.

Every manifest must pass the Kubernetes schema (kubernetes-validate, strict: unknown fields fail) and the
permissions must be exactly what the bot uses: the expected sets below are the contract, so broadening a
Role, a ClusterRole or the IAM policy fails a test until someone changes the contract on purpose.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bot.adapters.cluster import kube, preflight
from bot.adapters.cluster.cohort import cohort_secret
from bot.adapters.cluster.rest import RESOURCES
from bot.adapters.leader import LEASE_NAME
from bot.cli.main import app as cli_app
from bot.config import Settings, load_settings
from bot.domain.release import ReleaseManifest

REPO = Path(__file__).resolve().parents[2]
BOT = REPO / "deploy" / "bot"
KUBE = BOT / "kubernetes"
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

# S3 operations whose IAM action is not named after the operation (AWS's Service Authorization Reference for S3).
S3_ACTION_OF = {"ListObjectsV2": "ListBucket", "HeadObject": "GetObject", "GetPublicAccessBlock": "GetBucketPublicAccessBlock",
                "GetBucketEncryption": "GetEncryptionConfiguration"}
# Granted without a call of the bot's own: S3 asks KMS to decrypt SSE-KMS objects on the caller's behalf.
IMPLIED_IAM_ACTIONS = {"kms:Decrypt"}


def boto3_calls() -> dict[str, set[str]]:
    """Every boto3 client method called in bot/adapters/aws, as ``service → {OperationName}``, read from the code.

    A module's services are the ones it names when it makes a client (``client("s3", …)``); a method name is
    an operation of whichever of those services has it (``describe_images`` is ECR's beside S3, EC2's elsewhere);
    a paginator counts as its operation.
    """
    import boto3

    session = boto3.session.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    models: dict[str, dict[str, str]] = {}
    calls: dict[str, set[str]] = {}
    for path in sorted((REPO / "bot" / "adapters" / "aws").glob("*.py")):
        tree = ast.parse(path.read_text())
        services = {node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value in ("s3", "ecr", "ec2", "sagemaker")
                    and isinstance(node.func, (ast.Attribute, ast.Name))
                    and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id).endswith("client")}
        for service in services:
            models.setdefault(service, session.client(service).meta.method_to_api_mapping)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            if method == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                method = str(node.args[0].value)
            for service in services:
                operation = models[service].get(method)
                if operation is not None:
                    calls.setdefault(service, set()).add(operation)
    return calls


def expected_iam_actions() -> set[str]:
    actions = set(IMPLIED_IAM_ACTIONS)
    for service, operations in boto3_calls().items():
        actions |= {f"{service}:{S3_ACTION_OF.get(op, op) if service == 's3' else op}" for op in operations}
    return actions


# These two actions have no resource-level permissions (the Service Authorization Reference lists no resource
# type for them), so IAM requires "Resource": "*"; their statements are narrowed by region instead.
STAR_RESOURCE_ACTIONS = {"ec2:DescribeCapacityReservations", "sagemaker:ListTrainingPlans"}

APPLIED = [
    "namespace.yaml",
    "serviceaccount.yaml",
    "rbac-serving.yaml",
    "rbac-leader.yaml",
    "rbac-operator.yaml",
    "rbac-cluster.yaml",
    "configmap.yaml",
    "deployment.yaml",
    "service.yaml",
    "pdb.yaml",
    "networkpolicy.yaml",
]
NOT_APPLIED = ["secret.example.yaml", "migrate-job.yaml", "rbac-drills.yaml"]
# Availability drills' writes, granted only by the opt-in rbac-drills.yaml (never by kustomization.yaml).
DRILL_GRANTS: set[Grant] = (_grants(SERVING_NAMESPACE, "", ["pods"], ["delete"])
                            | _grants(None, "", ["nodes"], ["patch"]))


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KUBE / name).read_text()) if d]


def _all_objects(*, drills: bool = False) -> list[dict[str, Any]]:
    """Every object of the directory; the opt-in drill RBAC only when asked for."""
    return [doc for name in APPLIED + NOT_APPLIED if drills or name != "rbac-drills.yaml" for doc in _docs(name)]


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


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in _all_objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in _all_objects() if o["kind"] in ("Deployment", "Job")]


# --- the Kubernetes manifests -----------------------------------------------------------------------------


def test_every_file_in_the_directory_is_accounted_for_and_kustomization_applies_exactly_the_bot() -> None:
    on_disk = sorted(p.name for p in KUBE.glob("*.yaml"))
    assert on_disk == sorted(APPLIED + NOT_APPLIED + ["kustomization.yaml"])
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    assert kustomization["resources"] == APPLIED
    deployment_image = _one("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert [i["name"] for i in kustomization["images"]] == [deployment_image.rsplit(":", 1)[0]]


@pytest.mark.parametrize("name", APPLIED + NOT_APPLIED)
def test_manifest_passes_the_kubernetes_schema_strictly(name: str) -> None:
    docs = _docs(name)
    assert docs, f"{name} holds no object"
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_a_broken_manifest() -> None:
    """Guards the test above: a misspelt field is caught, so passing means something."""
    deployment = _one("Deployment")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_roles_grant_exactly_what_the_bot_uses_and_no_wildcards() -> None:
    granted = _granted(_all_objects())
    assert granted - EXPECTED_GRANTS == set(), "granted beyond what the bot uses"
    assert EXPECTED_GRANTS - granted == set(), "the bot would be forbidden something it uses"


def test_the_opt_in_drill_roles_grant_exactly_the_drills_writes() -> None:
    assert _granted(_docs("rbac-drills.yaml")) == DRILL_GRANTS
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
             for o in _all_objects(drills=True) if o["kind"] in ("Role", "ClusterRole")}
    bound = set()
    for obj in _all_objects(drills=True):
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
    config_file.write_text(_one("ConfigMap", "kimi-ops-config")["data"]["kimi-ops.yaml"])
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
    deployment = _one("Deployment", "kimi-ops")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == BOT_SA and deployment["metadata"]["namespace"] == BOT_NAMESPACE
    (container,) = pod["containers"]
    assert container["args"][:2] == ["serve", "--socket"]
    env = {e["name"]: e for e in container["env"]}
    secret = _one("Secret", "kimi-ops-secrets")
    for key in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "KIMI_DATABASE_URL",
                "KIMI_ALERTMANAGER_WEBHOOK_TOKEN"):
        assert "value" not in env[key], f"{key} must come from the Secret, not a literal"
        ref = env[key]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    config_path = Path(env["KIMI_CONFIG"]["value"])
    config_volume = next(v for v in pod["volumes"] if v.get("configMap"))
    mount = next(m for m in container["volumeMounts"] if m["name"] == config_volume["name"])
    assert mount["readOnly"] is True and config_path.parent == Path(mount["mountPath"])
    assert config_volume["configMap"]["name"] == _one("ConfigMap", "kimi-ops-config")["metadata"]["name"]
    assert {"key": "kimi-ops.yaml", "path": config_path.name} in config_volume["configMap"]["items"]
    port = container["ports"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}  # the process answers
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}  # database, schema, Slack
    assert container["args"][container["args"].index("--port") + 1] == str(port["containerPort"])


def test_service_pdb_and_network_policy_select_the_bot_pods() -> None:
    labels = _one("Deployment", "kimi-ops")["spec"]["template"]["metadata"]["labels"]
    assert _one("Service", "kimi-ops-metrics")["spec"]["selector"].items() <= labels.items()
    assert _one("Service", "kimi-ops-metrics")["spec"]["type"] == "ClusterIP"
    pdb = _one("PodDisruptionBudget", "kimi-ops")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items() and pdb["spec"]["minAvailable"] == 1
    policy = _one("NetworkPolicy", "kimi-ops")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}


def test_network_policy_allows_only_dns_https_the_model_endpoint_alertmanager_and_postgres() -> None:
    policy = _one("NetworkPolicy", "kimi-ops")["spec"]
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
    secret = _one("Secret", "kimi-ops-secrets")
    assert "data" not in secret
    for key, value in secret["stringData"].items():
        assert "REPLACE-ME" in value, f"{key} looks like a real value"
    assert not re.search(r"xox[bpa]-\d", (KUBE / "secret.example.yaml").read_text()), "a real-looking Slack token"


def test_service_account_carries_the_irsa_role_that_trusts_exactly_it() -> None:
    sa = _one("ServiceAccount", BOT_SA)
    role_arn = sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert re.fullmatch(r"arn:aws:iam::\d{12}:role/[\w+=,.@-]+", role_arn)
    trust = json.loads((BOT / "iam-trust-policy.json").read_text())
    (statement,) = trust["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    conditions = statement["Condition"]["StringEquals"]
    subjects = [v for k, v in conditions.items() if k.endswith(":sub")]
    assert subjects == [f"system:serviceaccount:{BOT_NAMESPACE}:{BOT_SA}"]
    assert [v for k, v in conditions.items() if k.endswith(":aud")] == ["sts.amazonaws.com"]


# --- the IAM policy -----------------------------------------------------------------------------------------


def _statements() -> list[dict[str, Any]]:
    policy = json.loads((BOT / "iam-policy.json").read_text())
    assert policy["Version"] == "2012-10-17"
    return policy["Statement"]


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def test_iam_policy_grants_exactly_the_calls_the_bot_makes() -> None:
    statements = _statements()
    sids = [s["Sid"] for s in statements]
    assert len(set(sids)) == len(sids) and all(re.fullmatch(r"[A-Za-z0-9]+", sid) for sid in sids)
    actions = [a for s in statements for a in _as_list(s["Action"])]
    assert all(s["Effect"] == "Allow" and "NotAction" not in s and "NotResource" not in s for s in statements)
    assert not [a for a in actions if "*" in a], "wildcard actions"
    # Derived from the code: a call added without its grant fails here, and so does a grant no code uses.
    expected = expected_iam_actions()
    assert {"s3:GetObject", "s3:ListBucket", "ecr:DescribeImages", "ec2:DescribeCapacityReservations"} <= expected
    assert set(actions) == expected, (set(actions) - expected, expected - set(actions))


def test_iam_resources_are_scoped_except_where_aws_requires_a_star() -> None:
    for statement in _statements():
        resources = _as_list(statement["Resource"])
        if "*" in resources:
            assert set(_as_list(statement["Action"])) <= STAR_RESOURCE_ACTIONS, f"{statement['Sid']}: Resource * not required"
            assert statement["Condition"]["StringEquals"]["aws:RequestedRegion"], statement["Sid"]
        for resource in resources:
            if resource != "*":
                assert resource.startswith("arn:aws:") and not resource.endswith(":*"), f"{statement['Sid']}: {resource}"
    # Bucket-level actions on the bucket ARN, object-level ones on its objects, never the other way round.
    for statement in _statements():
        for action in _as_list(statement["Action"]):
            if action.startswith("s3:GetObject"):
                assert all(r.endswith("/*") for r in _as_list(statement["Resource"])), action
            elif action.startswith("s3:"):
                assert all(r.startswith("arn:aws:s3:::") and "/" not in r for r in _as_list(statement["Resource"])), action
    kms = next(s for s in _statements() if "kms:Decrypt" in _as_list(s["Action"]))
    assert kms["Condition"]["StringEquals"]["kms:ViaService"].startswith("s3.")


def _iam_allows(action: str, arn: str) -> bool:
    return any(
        action in _as_list(s["Action"]) and any(fnmatch.fnmatchcase(arn, r) for r in _as_list(s["Resource"]))
        for s in _statements()
    )


def test_iam_resources_cover_the_example_release() -> None:
    """The artifact gate can read the example release's weights, licence, report and image, and nothing is spare."""
    release = ReleaseManifest.model_validate(
        yaml.safe_load((REPO / "deploy" / "releases" / "kimi-k3-2026-08-01.yaml").read_text()))
    bucket = release.weights.bucket
    assert _iam_allows("s3:ListBucket", f"arn:aws:s3:::{bucket}")
    assert _iam_allows("s3:GetBucketPolicy", f"arn:aws:s3:::{bucket}")
    for key in [release.weights.key_prefix + o.key for o in release.weights.objects]:
        assert _iam_allows("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}")
    assert not _iam_allows("s3:GetObject", "arn:aws:s3:::some-other-bucket/config.json")
    registry, repository = release.image.split("@", 1)[0].split("/", 1)
    account, _, _, region, *_ = registry.split(".")
    assert _iam_allows("ecr:DescribeImageScanFindings", f"arn:aws:ecr:{region}:{account}:repository/{repository}")
    assert not _iam_allows("ecr:DescribeImages", f"arn:aws:ecr:{region}:{account}:repository/some-other-repo")


def test_the_cluster_page_explains_every_iam_statement() -> None:
    section = (REPO / "docs" / "cluster.md").read_text()
    assert section.startswith("# Running the bot in a cluster")
    for sid in (s["Sid"] for s in _statements()):
        assert f"`{sid}`" in section, f"docs/cluster.md does not explain statement {sid}"


# --- the image ----------------------------------------------------------------------------------------------


def _dockerfile() -> str:
    return (BOT / "Dockerfile").read_text()


def test_dockerfile_pins_its_base_by_version_and_digest_and_runs_non_root() -> None:
    text = _dockerfile()
    pinned = re.findall(r"^ARG PYTHON_IMAGE=(python:3\.11\.\d+-slim-\w+@sha256:[0-9a-f]{64})$", text, re.M)
    assert len(pinned) == 1
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms and all(f == "${PYTHON_IMAGE}" for f in froms), froms
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] == "10001"
    assert re.search(r"^ENTRYPOINT \[\"kimi-ops\"\]$", text, re.M)
    # serve binds 127.0.0.1 by default; in a container the probes and Prometheus come from outside it.
    assert re.search(r'^CMD \["serve", "--socket", "--host", "0.0.0.0"\]$', text, re.M)
    assert not re.search(r"^HEALTHCHECK", text, re.M)
    assert not re.search(r"^ADD\s", text, re.M), "ADD can fetch URLs and unpack archives; COPY is enough"
    deployment = _one("Deployment", "kimi-ops")["spec"]["template"]["spec"]
    assert deployment["securityContext"]["runAsUser"] == int(users[-1].split(":")[0])


def _dockerignore_admits(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    admitted = True
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, pattern[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes)
        if hit:
            admitted = negate
    return admitted


def test_image_contains_every_package_and_the_build_context_keeps_local_state_out() -> None:
    copy_lines = re.findall(r"^COPY (?!--from)(.+)$", _dockerfile(), re.M)
    copied = {source for line in copy_lines for source in line.split()[:-1]}
    assert copied == {"bot", "commands", "jobs", "migrations", "pyproject.toml", "README.md", "deploy/evaluation",
                      ".ci/constraints.txt"}
    for source in copied:
        assert _dockerignore_admits(source), f".dockerignore excludes {source}, which the Dockerfile copies"
    for private in (".venv/bin/python", ".kimi-ops/kimi-ops.db", ".git/config", "tests/conftest.py", ".env",
                    "bot/__pycache__/x.pyc"):
        assert not _dockerignore_admits(private), f"{private} would be sent to the image build"


def test_the_image_carries_the_model_gate_evaluation_set_where_its_setting_points() -> None:
    # Without it the model gate of an in-cluster bot would fail to load its cases on every deploy.
    text = _dockerfile()
    copied = re.search(r"^COPY deploy/evaluation (\S+)$", text, re.M)
    configured = re.search(r"KIMI_EVALUATION_SET=(\S+)", text)
    assert copied and configured
    image_path = Path(configured.group(1))
    assert image_path.parent == Path(copied.group(1))
    assert (REPO / "deploy" / "evaluation" / image_path.name).is_file()


def _runtime_closure(*extras: str) -> set[str]:
    """Distributions the image installs: the runtime dependencies (with their extras) and theirs, transitively.

    With ``extras``, also those of kimi-ops' own optional-dependency groups of those names.
    """
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    raw_requirements = list(project["dependencies"])
    for extra in extras:
        raw_requirements += project["optional-dependencies"][extra]
    pending = [Requirement(r) for r in raw_requirements]
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        for raw in metadata.requires(requirement.name) or []:
            child = Requirement(raw)
            extras = requirement.extras or {""}
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras):
                pending.append(child)
    return seen


def _third_party_imports(paths: list[Path]) -> dict[str, str]:
    """Top-level third-party modules the files import (anywhere, lazily too), each with one file importing it."""
    found: dict[str, str] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("bot", "commands", "jobs", "migrations"):
                    found.setdefault(top, str(path.relative_to(REPO)))
    return found


def _not_provided(imports: dict[str, str], installed: set[str]) -> dict[str, str]:
    providers = metadata.packages_distributions()
    return {top: where for top, where in imports.items()
            if not {canonicalize_name(d) for d in providers.get(top, [])} & installed}


def test_the_image_leaves_the_sandbox_extra_out_and_says_so() -> None:
    # The image installs the bare wheel; `kimi-ops demo` there answers with the install hint (tested in
    # test_sandbox_demo), so the Dockerfile must not half-install the stand-ins either.
    text = _dockerfile()
    installs = re.findall(r"pip install --constraint constraints.txt (\S+)", text)
    assert installs == ["/wheels/kimi_ops-*.whl"], installs
    instructions = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"sandbox|moto|kmock|aiohttp|deploy/releases", instructions)
    assert "WITHOUT the `sandbox` extra" in text and "kimi-ops demo" in text
    assert not _dockerignore_admits("deploy/releases/kimi-k3-2026-08-01.yaml")
    assert not {"moto", "kmock"} & _runtime_closure()  # (aiohttp comes with the Kubernetes client anyway)


def test_the_image_installs_the_versions_ci_pinned() -> None:
    # The image resolves nothing afresh: every distribution it installs is pinned in .ci/constraints.txt, the
    # file CI installs from, and the build copies that very file (the .dockerignore admits it).
    text = _dockerfile()
    assert re.search(r"^COPY \.ci/constraints\.txt \./constraints\.txt$", text, re.M)
    assert re.findall(r"pip install (\S+)", text) == ["--constraint"]
    pinned = {canonicalize_name(line.split("==")[0]) for line in (REPO / ".ci" / "constraints.txt").read_text().splitlines()
              if "==" in line and not line.lstrip().startswith("#")}
    assert _runtime_closure() - pinned == set(), "installed by the image but not pinned in .ci/constraints.txt"


def test_the_sandbox_extra_provides_every_library_the_stand_ins_import() -> None:
    sandbox = sorted((REPO / "bot" / "sandbox").rglob("*.py"))
    imports = _third_party_imports(sandbox)
    assert {"moto", "kmock", "aiohttp"} <= set(imports), imports
    assert _not_provided(imports, _runtime_closure("sandbox")) == {}, "imported by bot/sandbox but not in the sandbox extra"


def test_every_library_the_bot_imports_is_installed_in_the_image() -> None:
    """The image installs runtime dependencies only; a module imported from a dev-only package breaks it there.

    ``bot/sandbox`` (the embedded stand-ins for the demo) is the one part built on the optional `sandbox` extra.
    """
    paths = [path for package in ("bot", "commands", "jobs", "migrations") for path in (REPO / package).rglob("*.py")
             if path.relative_to(REPO).parts[:2] != ("bot", "sandbox")]
    missing = _not_provided(_third_party_imports(paths), _runtime_closure())
    assert missing == {}, "imported but not a runtime dependency (add it to [project].dependencies)"


def _parse_cli(args: list[str]) -> dict[str, Any]:
    """Parse ``kimi-ops ARGS`` as the entry point would (sub-commands resolved, options checked), without running.

    The container commands put no group-level options before a sub-command, so each group consumes one name.
    """
    command: Any = typer.main.get_command(cli_app)
    ctx = command.make_context("kimi-ops", list(args))
    rest = list(args)
    while hasattr(command, "list_commands"):
        name, *rest = rest
        command = command.get_command(ctx, name)
        assert command is not None, f"kimi-ops has no command {name}"
        ctx = command.make_context(name, list(rest), parent=ctx)
    return dict(ctx.params)


def test_container_commands_are_commands_the_cli_accepts() -> None:
    """The image's CMD, the Deployment's args and the migration Job's args parse with the real CLI."""
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", _dockerfile(), re.M).group(1))  # type: ignore[union-attr]
    assert _parse_cli(cmd)["socket"] is True
    (container,) = _one("Deployment", "kimi-ops")["spec"]["template"]["spec"]["containers"]
    params = _parse_cli(container["args"])
    assert params["socket"] is True and params["jobs"] is True and params["port"] == container["ports"][0]["containerPort"]
    (job,) = _one("Job", "kimi-ops-db-upgrade")["spec"]["template"]["spec"]["containers"]
    assert _parse_cli(job["args"]) == {"revision": "head"}
    with pytest.raises(Exception, match="No such option"):
        _parse_cli(["serve", "--sockets"])
