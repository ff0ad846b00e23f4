"""Render a release tuple onto one endpoint as Kubernetes objects.

HyperPod: one ``InferenceEndpointConfig`` following the guide's launch manifest,
with the weights read from the release's versioned S3 prefix
(``modelSourceType: s3``), the image by digest, the release's vLLM arguments and
environment, ``worker.requestLimits`` from the endpoint settings and metrics on;
no SageMaker endpoint (``endpointName: ""``) and no ``loadBalancer`` unless the
endpoint's ``door:`` declares them, after its egress and ingress policies.

EKS: a dedicated ServiceAccount (no token mounted, no IAM role), the weights as
a read-only Mountpoint-for-S3 volume (PersistentVolume + claim: the CSI driver's
own role reads the bucket, the pod holds no AWS credentials), a Deployment on
one ``p6-b300.48xlarge`` of the reservation with 8 GPUs, startup and readiness
probes on ``/health``, a private ClusterIP Service, a PodDisruptionBudget and a
NetworkPolicy that admits only the door's peers and lets out only DNS
(:mod:`.policies`).

Request limits: HyperPod's operator enforces ``worker.requestLimits``. vLLM has
no such block, so on EKS the concurrency limit becomes vLLM's own
``--max-num-seqs`` (appended to the release's arguments, replacing any the
release sets: the endpoint's accepted limit is the authority), and all three
limits are written as Deployment annotations (``kimi-ops.io/max-concurrent-
requests``, ``…/max-queue-size``, ``…/overflow-status-code``). vLLM queues
without bound, so the queue bound and the overflow status are enforced by the
application layer in front of the model, which reads them there (see DESIGN.md,
"Rendering, apply and rollout watch"); ``Cluster.observe`` reads them back.

Secrets never sit in the objects: a release's secret env references become
``valueFrom.secretKeyRef`` (HyperPod's CRD carries the same ``valueFrom`` in
``worker.environmentVariables``); an AWS Secrets Manager ARN reads the Secret
the cluster's secret sync writes (``kimi-ops-sm-…``, listed in the
``kimi-ops.io/aws-secrets`` annotation for that sync).

Every object carries the release name and the tuple hash as labels and
annotations, so ``kubectl`` shows which release is running.
"""

from __future__ import annotations

import json
from typing import Any

from bot.adapters.cluster.eks_limits import eks_serving_args, limit_annotations
from bot.adapters.cluster.policies import eks_policy, hyperpod_pod_selector, hyperpod_policies
from bot.adapters.cluster.pools import model_pool
from bot.config import EndpointSettings
from bot.domain.capture import hyperpod_data_capture
from bot.domain.release import ReleaseManifest
from bot.domain.secrets import SecretRef

IEC_API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
RELEASE_LABEL = "kimi-ops.io/release"
HASH_ANNOTATION = "kimi-ops.io/tuple-hash"
ENDPOINT_LABEL = "kimi-ops.io/endpoint"
APP = "kimi-k3"
GPUS = 8
PORT = 8000
MODEL_MOUNT = "/opt/ml/model"
CAPTURE_ANNOTATION = "kimi-ops.io/data-capture"
MOUNTPOINT_S3_DRIVER = "s3.csi.aws.com"
CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
AWS_SECRETS_ANNOTATION = "kimi-ops.io/aws-secrets"


def _labels(release: ReleaseManifest, endpoint: EndpointSettings) -> dict[str, str]:
    # Label values are at most 63 characters: the release name fits, the 64-hex hash does not (annotation).
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/instance": endpoint.name,
        "app.kubernetes.io/managed-by": "kimi-ops",
        ENDPOINT_LABEL: endpoint.name,
        RELEASE_LABEL: release.name[:63],
    }


def _annotations(release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> dict[str, str]:
    annotations = {
        RELEASE_LABEL: release.name,
        HASH_ANNOTATION: release_hash,
        "kimi-ops.io/model-commit": release.model.commit,
        "kimi-ops.io/weights-prefix": release.weights.prefix,
        "kimi-ops.io/licence-version": release.licence.version,
    }
    if endpoint.reservation_id:
        annotations["kimi-ops.io/reservation"] = endpoint.reservation_id
    # What the endpoint captures of its traffic, stated on both paths (EKS renders no capture at all).
    annotations[CAPTURE_ANNOTATION] = json.dumps(endpoint.data_capture.summary(), separators=(",", ":"))
    annotations.update(secret_sources(release))
    return annotations


def _metadata(name: str, namespace: str | None, release: ReleaseManifest, endpoint: EndpointSettings,
              release_hash: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": _labels(release, endpoint),
        "annotations": _annotations(release, endpoint, release_hash),
    }
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def served_model_name(release: ReleaseManifest, endpoint: EndpointSettings) -> str:
    return release.served_model_name or endpoint.served_model_name


def model_location(release: ReleaseManifest) -> str:
    """The key prefix inside the bucket, without the trailing slash the release keeps."""
    return release.weights.key_prefix.rstrip("/")


def _env(release: ReleaseManifest) -> list[dict[str, Any]]:
    """Plain values as ``value``; secret references as ``valueFrom.secretKeyRef`` (the value never enters the object).

    An AWS Secrets Manager reference reads the Kubernetes Secret the cluster's secret sync writes it to
    (:func:`bot.domain.secrets.aws_secret_name`); :func:`secret_sources` tells the sync which ARN that is.
    """
    env: list[dict[str, Any]] = []
    for key, value in sorted(release.serving.env.items()):
        if isinstance(value, SecretRef):
            name, secret_key = value.kube_secret()
            env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": name, "key": secret_key}}})
        else:
            env.append({"name": key, "value": value})
    # Kubernetes expands $(VAR) only from variables listed before it: plain values first would not be enough when
    # a plain value refers to a secret, so references go first and keep their sorted order among themselves.
    return sorted(env, key=lambda item: "value" in item)


def secret_sources(release: ReleaseManifest) -> dict[str, str]:
    """Annotation for the secret sync: which Kubernetes Secret holds which AWS Secrets Manager ARN (if any)."""
    sources = {value.kube_secret()[0]: value.aws_secret for value in release.serving.secret_env().values() if value.aws_secret}
    if not sources:
        return {}
    return {AWS_SECRETS_ANNOTATION: json.dumps(dict(sorted(sources.items())), separators=(",", ":"))}


def _zone_affinity(endpoint: EndpointSettings) -> dict[str, Any] | None:
    if not endpoint.availability_zone:
        return None
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{
                "matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [endpoint.availability_zone]},
                ],
            }],
        },
    }


def render_hyperpod(release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> list[dict[str, Any]]:
    """The guide's InferenceEndpointConfig, with S3 weights, a pinned image and request limits."""
    limits = endpoint.effective_request_limits
    gpus = {"nvidia.com/gpu": GPUS}
    spec: dict[str, Any] = {
        "modelName": served_model_name(release, endpoint),
        # No SageMaker endpoint unless the endpoint declares one: the CRD's empty name creates none (one door).
        "endpointName": endpoint.door.sagemaker_endpoint or "",
        "instanceType": endpoint.sagemaker_instance_type,
        "invocationEndpoint": "v1/chat/completions",
        "replicas": 1,
        "maxDeployTimeInSeconds": endpoint.max_deploy_seconds,
        "modelSourceConfig": {
            "modelSourceType": "s3",
            "s3Storage": {"bucketName": release.weights.bucket, "region": endpoint.region},
            "modelLocation": model_location(release),
            # Copy the weights to local storage before vLLM starts: a cold pod reads them at NVMe speed.
            "prefetchEnabled": True,
        },
        "dataCapture": hyperpod_data_capture(endpoint.data_capture),
        "metrics": {"enabled": True, "modelMetrics": {"port": PORT, "path": "/metrics"}},
        "tags": [
            {"name": RELEASE_LABEL, "value": release.name},
            {"name": HASH_ANNOTATION, "value": release_hash},
        ],
        "worker": {
            "image": release.image,
            "modelInvocationPort": {"containerPort": PORT, "name": "http"},
            "modelVolumeMount": {"name": "model-weights", "mountPath": MODEL_MOUNT},
            "resources": {"requests": dict(gpus), "limits": dict(gpus)},
            "args": list(release.serving.args),
            "environmentVariables": _env(release),
            "requestLimits": {
                "maxConcurrentRequests": limits.max_concurrent_requests,
                "maxQueueSize": limits.max_queue_size,
                "overflowStatusCode": limits.overflow_status_code,
            },
        },
    }
    if endpoint.door.load_balancer is not None:  # the operator's ALB, only when declared (prod: a side-door exception)
        spec["loadBalancer"] = {"healthCheckPath": endpoint.door.load_balancer.health_check_path}
    affinity = _zone_affinity(endpoint)
    if affinity is not None:
        spec["nodeAffinity"] = affinity
    # The policies first: they hold before the operator starts a model pod.
    return [
        *hyperpod_policies(endpoint, _metadata(endpoint.name, endpoint.namespace, release, endpoint, release_hash)),
        *model_pool(endpoint, _metadata(endpoint.name, endpoint.namespace, release, endpoint, release_hash),
                    hyperpod_pod_selector(endpoint)),
        {
            "apiVersion": IEC_API_VERSION,
            "kind": "InferenceEndpointConfig",
            "metadata": _metadata(endpoint.name, endpoint.namespace, release, endpoint, release_hash),
            "spec": spec,
        },
    ]


def weights_volume_name(endpoint: EndpointSettings, release_hash: str) -> str:
    """One PersistentVolume per (endpoint, tuple): a PV's source is immutable, a new tuple gets a new one."""
    return f"{endpoint.name}-weights-{release_hash[:12]}"


def _selector_labels(endpoint: EndpointSettings) -> dict[str, str]:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": endpoint.name}


def _node_selector(endpoint: EndpointSettings) -> dict[str, str]:
    selector = {
        "node.kubernetes.io/instance-type": endpoint.instance_type.removeprefix("ml."),
        # Managed node groups launched into an EC2 Capacity Block carry this label: only reserved nodes qualify.
        CAPACITY_TYPE_LABEL: "CAPACITY_BLOCK",
    }
    if endpoint.availability_zone:
        selector["topology.kubernetes.io/zone"] = endpoint.availability_zone
    return selector


def _probe(failure_threshold: int, period: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failure_threshold,
    }


def _with_annotations(meta: dict[str, Any], extra: dict[str, str]) -> dict[str, Any]:
    return {**meta, "annotations": {**meta["annotations"], **extra}}


def render_eks(release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> list[dict[str, Any]]:
    """ServiceAccount, weights volume, Deployment, Service, PodDisruptionBudget and NetworkPolicy."""
    ns = endpoint.namespace
    name = endpoint.name

    def meta(obj_name: str, namespace: str | None = ns) -> dict[str, Any]:
        return _metadata(obj_name, namespace, release, endpoint, release_hash)

    selector = _selector_labels(endpoint)
    volume = weights_volume_name(endpoint, release_hash)
    bucket_prefix = model_location(release) + "/"
    gpus = {"nvidia.com/gpu": str(GPUS)}
    limits = endpoint.effective_request_limits
    # Loading 2.8T parameters takes a long time: the startup probe allows the whole deploy window.
    startup_failures = max(1, endpoint.max_deploy_seconds // 10)
    container = {
        "name": "vllm",
        "image": release.image,
        "args": eks_serving_args(release, limits),
        "env": _env(release),
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(gpus), "limits": dict(gpus)},
        "volumeMounts": [
            {"name": "model-weights", "mountPath": MODEL_MOUNT, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
        "startupProbe": _probe(startup_failures, 10),
        "readinessProbe": _probe(3, 10),
        "livenessProbe": _probe(6, 20),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": name,
        "automountServiceAccountToken": False,
        "nodeSelector": _node_selector(endpoint),
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 120,
        "containers": [container],
        "volumes": [
            {"name": "model-weights", "persistentVolumeClaim": {"claimName": volume, "readOnly": True}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
        ],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta(name),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": meta(volume, None),
            "spec": {
                "capacity": {"storage": "8Ti"},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": ns, "name": volume},
                "mountOptions": ["read-only", f"region {endpoint.region}", f"prefix {bucket_prefix}"],
                "csi": {
                    "driver": MOUNTPOINT_S3_DRIVER,
                    "volumeHandle": volume,
                    "volumeAttributes": {"bucketName": release.weights.bucket},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta(volume),
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "8Ti"}},
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            # The limits sit on the Deployment, not the pod template: a new queue bound needs no new pod.
            "metadata": _with_annotations(meta(name), limit_annotations(limits)),
            "spec": {
                "replicas": 1,
                # One reserved node holds one copy: the old pod must leave before the new one fits.
                "strategy": {"type": "Recreate"},
                "progressDeadlineSeconds": endpoint.max_deploy_seconds,
                "selector": {"matchLabels": dict(selector)},
                "template": {
                    "metadata": {
                        "labels": _labels(release, endpoint),
                        "annotations": _annotations(release, endpoint, release_hash),
                    },
                    "spec": pod_spec,
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(name),
            "spec": {
                "type": "ClusterIP",
                "selector": dict(selector),
                "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta(name),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": dict(selector)}},
        },
        eks_policy(endpoint, meta(name), selector),
        *model_pool(endpoint, meta(name), selector),
    ]


def consistency_errors(release: ReleaseManifest, endpoint: EndpointSettings) -> list[str]:
    """Mismatches between the release and the endpoint that a schema cannot see."""
    errors: list[str] = []
    served = release.served_model_name
    if served is not None and served != endpoint.served_model_name:
        errors.append(
            f"serving.args --served-model-name: the release serves {served!r} but endpoint {endpoint.name} "
            f"expects {endpoint.served_model_name!r}; align served_model_name in the endpoint settings"
        )
    args = release.serving.args
    model_arg = release.serving.arg_value("--model")
    if model_arg is None and args and not args[0].startswith("-"):
        model_arg = args[0]  # vLLM's positional model path
    if model_arg is not None and model_arg != MODEL_MOUNT:
        errors.append(f"serving.args model: must be {MODEL_MOUNT} (where the S3 weights are mounted), not {model_arg!r}")
    return errors


def render_objects(release: ReleaseManifest, endpoint: EndpointSettings, release_hash: str) -> list[dict[str, Any]]:
    if endpoint.kind == "hyperpod":
        return render_hyperpod(release, endpoint, release_hash)
    return render_eks(release, endpoint, release_hash)
