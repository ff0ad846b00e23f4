"""What the tests of the bot's own deployment (``deploy/bot/``: ``tests/project/test_bot_*.py``) share: the
repository's paths and the Kubernetes manifests' objects as the tests read them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
BOT = REPO / "deploy" / "bot"
KUBE = BOT / "kubernetes"

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


def manifest_docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KUBE / name).read_text()) if d]


def all_objects(*, drills: bool = False) -> list[dict[str, Any]]:
    """Every object of the directory; the opt-in drill RBAC only when asked for."""
    return [doc for name in APPLIED + NOT_APPLIED if drills or name != "rbac-drills.yaml" for doc in manifest_docs(name)]


def one_object(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in all_objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
