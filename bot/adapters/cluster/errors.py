"""The one error the cluster adapter raises for a manifest it will not apply."""

from __future__ import annotations


class InvalidManifest(Exception):
    """A rendered manifest breaks its schema; ``errors`` lists ``schema path: message`` lines."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        shown = "; ".join(self.errors[:3])
        more = f" (and {len(self.errors) - 3} more)" if len(self.errors) > 3 else ""
        super().__init__(f"the manifest is invalid, nothing was applied: {shown}{more}")


class ClusterError(Exception):
    """The API server refused or could not be reached; the message is one line naming the object."""
