"""The rendered manifests of the example release, written to ``deploy/endpoints/`` for readers.

``python -m bot.adapters.cluster.examples`` rewrites them; a test fails when
they differ from what the renderer produces now.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.adapters.cluster.kube import render_manifest
from bot.config import EndpointSettings
from bot.domain.release import ReleaseManifest

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_RELEASE = REPO / "deploy" / "releases" / "kimi-k3-2026-08-01.yaml"
EXAMPLE_CONFIG = REPO / "deploy" / "kimi-ops.example.yaml"
OUTPUT = REPO / "deploy" / "endpoints"


def example_endpoints() -> list[EndpointSettings]:
    """The example config's HyperPod endpoint, and the same endpoint on the EKS path."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    hyperpod = EndpointSettings.model_validate(config["endpoints"][0])
    eks = hyperpod.model_copy(update={"name": "kimi-k3-eks", "kind": "eks", "reservation_id": "cr-0123456789abcdef0"})
    return [hyperpod, eks]


def example_manifests() -> dict[str, str]:
    """File name → manifest text, with a header naming the release and endpoint."""
    release = ReleaseManifest.model_validate(yaml.safe_load(EXAMPLE_RELEASE.read_text(encoding="utf-8")))
    files: dict[str, str] = {}
    for endpoint in example_endpoints():
        manifest = render_manifest(release, endpoint, release.tuple_hash())
        header = (f"# Rendered by kimi-ops for release {release.name} on endpoint {endpoint.name} ({endpoint.kind}).\n"
                  f"# Generated: python -m bot.adapters.cluster.examples. Manifest sha256 {manifest.sha256}\n")
        files[f"{release.name}.{endpoint.kind}.yaml"] = header + manifest.text
    return files


def main() -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    for name, text in example_manifests().items():
        (OUTPUT / name).write_text(text, encoding="utf-8")
        print(OUTPUT / name)


if __name__ == "__main__":
    main()
