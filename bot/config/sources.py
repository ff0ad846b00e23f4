"""Where settings are read from: the environment (lists also comma-separated) and the ``KIMI_CONFIG`` YAML file."""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

from bot.config.examples import EXAMPLES
from bot.config_error import ConfigError
from bot.safe_yaml import YamlFileError, load_yaml_file

CONFIG_MAX_BYTES = 1024 * 1024


def env_name(settings_cls: type[BaseSettings], field_name: str) -> str:
    """The variable a setting is read from: its alias (``SLACK_BOT_TOKEN``) or ``KIMI_`` and its name."""
    field = settings_cls.model_fields.get(field_name)
    alias = field.validation_alias if field is not None else None
    return alias.choices[0] if isinstance(alias, AliasChoices) else f"KIMI_{field_name.upper()}"  # type: ignore[return-value]


def is_scalar_list(field: FieldInfo) -> bool:
    """``list[str]``, ``list[float]``…: a list whose items are plain values, not objects."""
    if typing.get_origin(field.annotation) is not list:
        return False
    (item,) = typing.get_args(field.annotation) or (Any,)
    if typing.get_origin(item) is Annotated:
        item = typing.get_args(item)[0]
    return item in (str, int, float)


class EnvSource(EnvSettingsSource):
    """The environment, where a list may also be written comma-separated and bad JSON names its variable."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        if not isinstance(value, str):
            return super().decode_complex_value(field_name, field, value)
        scalar_list = is_scalar_list(field)
        if scalar_list and not value.lstrip().startswith("["):
            # The natural way to write one region (us-east-1) or a few thresholds (24,6,1).
            return [part.strip() for part in value.split(",") if part.strip()]
        try:
            decoded = json.loads(value)
        except ValueError as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not JSON"
            form = "JSON or comma-separated values" if scalar_list else "JSON"
            example = EXAMPLES.get(field_name, "see docs/configuration.md")
            raise ConfigError(
                f"{env_name(self.settings_cls, field_name)}: not valid {form} ({reason}); e.g. {example}"
            ) from None
        return decoded


class YamlFileSource(PydanticBaseSettingsSource):
    """Reads the YAML file named by ``KIMI_CONFIG``; lower priority than the environment."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - unused
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = os.environ.get("KIMI_CONFIG")
        if not path:
            return {}
        if not Path(path).exists():
            raise ConfigError(f"KIMI_CONFIG: file {path} does not exist; point KIMI_CONFIG at your YAML settings file") from None
        try:
            data = load_yaml_file(Path(path), max_bytes=CONFIG_MAX_BYTES) or {}
        except YamlFileError as exc:
            raise ConfigError(f"KIMI_CONFIG: {exc}; fix the file (e.g. deploy/kimi-ops.example.yaml)") from None
        if not isinstance(data, dict):
            raise ConfigError(f"KIMI_CONFIG: {path} must hold a mapping with keys such as endpoints: and roles:")
        return data

