"""The cluster preflight against kmock's Kubernetes emulator over HTTP: a ready HyperPod or EKS cluster passes and
names the GPU zone; a missing CRD, operator, namespace or GPU node is reported; an unreachable API server is an
error, not a pass.
"""

from __future__ import annotations

from kubernetes import client

from bot.adapters.cluster import KubernetesCluster
from bot.adapters.cluster.preflight import crd_name
from bot.sandbox.kube import KubeStandIn, seed_cluster
from tests.cluster_support import NS, endpoint
from tests.cluster_support import cluster as cluster
from tests.cluster_support import kube as kube
from tests.cluster_support import seeded as seeded


def test_preflight_passes_on_a_ready_hyperpod_cluster_and_reports_the_gpu_zone(cluster: KubernetesCluster) -> None:
    checks = {c.name: c for c in cluster.preflight(endpoint())}
    assert {n: c.status for n, c in checks.items()} == {
        "cluster.crd": "pass", "cluster.operator": "pass", "cluster.namespace": "pass", "cluster.gpu_nodes": "pass"}
    assert checks["cluster.gpu_nodes"].details["zones"] == ["us-east-1a"]


def test_eks_preflight_does_not_ask_for_the_hyperpod_operator(cluster: KubernetesCluster) -> None:
    assert [c.name for c in cluster.preflight(endpoint("eks"))] == ["cluster.namespace", "cluster.gpu_nodes"]


def test_preflight_reports_a_missing_crd(seeded: KubeStandIn, cluster: KubernetesCluster) -> None:
    seeded.remove("CustomResourceDefinition", crd_name())
    crd = next(c for c in cluster.preflight(endpoint()) if c.name == "cluster.crd")
    assert crd.status == "fail" and "install the HyperPod inference operator" in crd.reason


def test_preflight_reports_an_unavailable_operator(kube: KubeStandIn) -> None:
    seed_cluster(kube.rest(), namespace=NS, operator_available=False)
    checks = {c.name: c for c in KubernetesCluster(kube.api_client()).preflight(endpoint())}
    assert checks["cluster.operator"].status == "fail" and "not available" in checks["cluster.operator"].reason
    assert checks["cluster.crd"].status == "pass"


def test_preflight_reports_a_missing_namespace(cluster: KubernetesCluster) -> None:
    checks = {c.name: c for c in cluster.preflight(endpoint(namespace="kimi-elsewhere"))}
    assert checks["cluster.namespace"].status == "fail" and "kimi-elsewhere does not exist" in checks["cluster.namespace"].reason


def test_preflight_reports_a_node_without_eight_gpus(kube: KubeStandIn) -> None:
    seed_cluster(kube.rest(), namespace=NS, gpus=4)
    nodes = next(c for c in KubernetesCluster(kube.api_client()).preflight(endpoint()) if c.name == "cluster.gpu_nodes")
    assert nodes.status == "fail" and "8 allocatable nvidia.com/gpu" in nodes.reason and "=4" in nodes.reason


def test_preflight_reports_a_cordoned_gpu_node(seeded: KubeStandIn, cluster: KubernetesCluster) -> None:
    [node] = seeded.rest().items("/api/v1/nodes")
    seeded.rest().merge_patch(f"/api/v1/nodes/{node['metadata']['name']}", {"spec": {"unschedulable": True}},
                              manager="kubectl-cordon")
    nodes = next(c for c in cluster.preflight(endpoint()) if c.name == "cluster.gpu_nodes")
    assert nodes.status == "fail" and "is cordoned" in nodes.reason


def test_preflight_reports_no_node_of_the_instance_type(kube: KubeStandIn) -> None:
    seed_cluster(kube.rest(), namespace=NS, instance_type="ml.p5.48xlarge")
    nodes = next(c for c in KubernetesCluster(kube.api_client()).preflight(endpoint()) if c.name == "cluster.gpu_nodes")
    assert nodes.status == "fail" and "no node of type p6-b300.48xlarge" in nodes.reason


def test_preflight_is_an_error_not_a_pass_when_the_api_server_is_unreachable() -> None:
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    config.retries = 0
    with client.ApiClient(config) as api:
        checks = KubernetesCluster(api).preflight(endpoint())
    assert {c.status for c in checks} == {"error"}
    assert all("could not ask the Kubernetes API" in c.reason for c in checks)
    # In words, not urllib3's repr of its connection pool and retry state.
    assert all("at http://127.0.0.1:9 is unreachable (connection refused)" in c.reason for c in checks), checks
    assert not any("HTTPConnectionPool" in c.reason or "MaxRetryError" in c.reason for c in checks)
