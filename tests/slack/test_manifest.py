"""The Slack app manifests grant exactly the scopes the code's Web API calls need, and wire what the app listens to.

The calls are found in the source (every ``<family>_<method>(`` of slack_sdk's
``WebClient`` outside the sandbox), so a new call without its scope in the
manifests, or a scope no call needs any more, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = {"socket": ROOT / "deploy/slack/manifest.yaml", "http": ROOT / "deploy/slack/manifest-http.yaml"}
# The bot scope each Web API method needs (https://api.slack.com/methods); views.* and auth.test need none.
METHOD_SCOPES: dict[str, frozenset[str]] = {
    "auth.test": frozenset(),
    "chat.postMessage": frozenset({"chat:write"}),
    "chat.postEphemeral": frozenset({"chat:write"}),
    "chat.update": frozenset({"chat:write"}),
    "views.open": frozenset(),
    "views.publish": frozenset(),
    "usergroups.users.list": frozenset({"usergroups:read"}),
    # The lookup of a post whose answer was lost reads public and private channels alike.
    "conversations.replies": frozenset({"channels:history", "groups:history"}),
    "conversations.history": frozenset({"channels:history", "groups:history"}),
    # slack_sdk's upload: files.getUploadURLExternal, then files.completeUploadExternal.
    "files.upload_v2": frozenset({"files:write"}),
}
CALL = re.compile(r"\.(auth|chat|views|usergroups|conversations|files|users|reactions|pins|team|apps|im)_([A-Za-z0-9_]+)\(")


def called_methods() -> set[str]:
    found: set[str] = set()
    for path in [*(ROOT / "bot").rglob("*.py"), *(ROOT / "commands").rglob("*.py"), *(ROOT / "jobs").rglob("*.py")]:
        if "sandbox" in path.parts:
            continue  # the stand-ins answer these calls; they make none
        for family, method in CALL.findall(path.read_text()):
            found.add(f"{family}.{method.replace('_', '.') if family == 'usergroups' else method}")
    return found


@pytest.mark.parametrize("variant", sorted(MANIFESTS))
def test_the_manifest_grants_exactly_the_scopes_the_code_uses(variant: str) -> None:
    manifest = yaml.safe_load(MANIFESTS[variant].read_text())
    calls = called_methods()
    assert {"chat.postMessage", "chat.update", "files.upload_v2", "conversations.replies", "usergroups.users.list",
            "views.publish"} <= calls
    unknown = calls - set(METHOD_SCOPES)
    assert not unknown, f"say which scope {sorted(unknown)} need in METHOD_SCOPES and the manifests"
    needed = {"commands"}.union(*(METHOD_SCOPES[m] for m in calls))  # commands: the /kimi slash command
    assert set(manifest["oauth_config"]["scopes"]["bot"]) == needed


@pytest.mark.parametrize("variant", sorted(MANIFESTS))
def test_the_manifest_wires_the_command_the_buttons_and_the_app_home(variant: str) -> None:
    manifest = yaml.safe_load(MANIFESTS[variant].read_text())
    features, settings = manifest["features"], manifest["settings"]
    (command,) = features["slash_commands"]
    assert command["command"] == "/kimi"
    assert features["app_home"]["home_tab_enabled"] is True
    assert settings["event_subscriptions"]["bot_events"] == ["app_home_opened"]
    assert settings["interactivity"]["is_enabled"] is True
    if variant == "socket":
        assert settings["socket_mode_enabled"] is True and "url" not in command
    else:
        # Every request to one path, the one `kimi-ops serve` answers (bot/slack/http.py).
        urls = {command["url"], settings["event_subscriptions"]["request_url"], settings["interactivity"]["request_url"]}
        assert settings["socket_mode_enabled"] is False and len(urls) == 1 and urls.pop().endswith("/slack/events")


def test_the_slack_page_sets_the_app_up_from_the_manifest() -> None:
    page = (ROOT / "docs" / "slack.md").read_text()
    assert "deploy/slack/manifest.yaml" in page and "deploy/slack/manifest-http.yaml" in page
    assert "files:write" in page
