"""Cluster adapter: render, validate, preflight, server-side apply, watch, admission and the route.

:class:`KubernetesCluster` implements the ``Cluster`` port of
:mod:`bot.services.ports` with the official ``kubernetes`` client, for HyperPod
(``InferenceEndpointConfig``) and plain EKS endpoints alike; :class:`ContextClusters`
picks one per endpoint's kubeconfig context.
"""

from __future__ import annotations

from bot.adapters.cluster.contexts import ContextClusters, kubeconfig_client
from bot.adapters.cluster.errors import ClusterError, InvalidManifest
from bot.adapters.cluster.kube import FIELD_MANAGER, KubernetesCluster, render_manifest
from bot.adapters.cluster.route_names import ROUTE_MANAGER, RouteNotConfigured

__all__ = ["FIELD_MANAGER", "ROUTE_MANAGER", "ClusterError", "ContextClusters", "InvalidManifest", "KubernetesCluster",
           "RouteNotConfigured", "kubeconfig_client", "render_manifest"]
