"""Who may do what: the four roles and the Slack users and user groups holding each."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["viewer", "deployer", "approver", "admin"]


class Roles(BaseModel):
    """Who may do what: Slack user IDs (``U…``/``W…``) or user-group IDs (``S…``)."""

    model_config = ConfigDict(extra="forbid")

    viewer: list[str] = Field(default_factory=list, description="See endpoints and deployments.")
    deployer: list[str] = Field(default_factory=list, description="Viewers who may also register, deploy, roll back, "
                                "cancel, re-run checks, ask for drills and acknowledge alerts.")
    approver: list[str] = Field(default_factory=list, description="Viewers who may also decide gates, stalled drains, "
                                "drills, proposed limits, licence reviews and exceptions.")
    admin: list[str] = Field(default_factory=list, description="Every role, plus admission by hand and forced cancels.")

    @property
    def members(self) -> set[str]:
        """Every user and user-group ID named in any role."""
        return {m for role in (self.viewer, self.deployer, self.approver, self.admin) for m in role}

