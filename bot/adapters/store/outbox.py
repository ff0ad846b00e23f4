"""Outbox events to ``events`` rows and back: the one place that knows the row's JSON shape.

:func:`to_row` gives an event's ``kind`` and JSON payload (its two envelope
fields, ``deployment_id`` and ``endpoint_name``, are the row's own columns);
:func:`from_row` rebuilds the event. Payload keys are the field names (or the
field's ``key`` metadata), datetimes are ISO 8601 strings, tuples are lists,
and a ``spread`` field's details sit at the payload's top level, so rows written
before events were typed read back unchanged. Keys a class does not know (an
older row's extra) are ignored unless the class has a ``spread`` field to keep
them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
from typing import Any

from bot.domain.events import BY_KIND, OutboxEvent

ENVELOPE = ("deployment_id", "endpoint_name")


class UnknownEvent(ValueError):
    """A row whose kind no event class names (written by a newer kimi-ops), or whose payload lacks a field."""


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    spread: bool
    is_datetime: bool
    is_tuple: bool


_FIELDS: dict[str, tuple[_Field, ...]] = {}


def _fields(cls: type[OutboxEvent]) -> tuple[_Field, ...]:
    """The stored fields of ``cls`` (type hints are resolved once per class)."""
    known = _FIELDS.get(cls.KIND)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name in ENVELOPE:
            continue
        hint = hints[f.name]
        args = typing.get_args(hint)
        out.append(_Field(
            name=f.name,
            key=str(f.metadata.get("key", f.name)),
            spread=bool(f.metadata.get("spread")),
            is_datetime=hint is dt.datetime or dt.datetime in args,
            is_tuple=typing.get_origin(hint) is tuple,
        ))
    _FIELDS[cls.KIND] = tuple(out)
    return _FIELDS[cls.KIND]


def _encode(f: _Field, value: Any) -> Any:
    if f.is_datetime and isinstance(value, dt.datetime):
        return value.isoformat()
    if f.is_tuple:
        return list(value)
    return value


def _decode(f: _Field, value: Any) -> Any:
    if f.is_datetime and isinstance(value, str):
        return dt.datetime.fromisoformat(value)
    if f.is_tuple and isinstance(value, list):
        return tuple(value)
    return value


def to_row(event: OutboxEvent) -> tuple[str, dict[str, Any]]:
    """The outbox row's ``kind`` and JSON payload of ``event``."""
    cls = type(event)
    if BY_KIND.get(cls.KIND) is not cls:
        raise TypeError(f"{cls.__name__} is not a stored event kind")
    payload: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    for f in _fields(cls):
        value = getattr(event, f.name)
        if f.spread:
            spread = dict(value)
        else:
            payload[f.key] = _encode(f, value)
    # Named keys win over a detail of the same name, as the audit rows built from the same dict always had it.
    return cls.KIND, {**spread, **payload}


def from_row(kind: str, deployment_id: int | None, endpoint_name: str | None, payload: dict[str, Any] | None) -> OutboxEvent:
    """The event an outbox row holds; :class:`UnknownEvent` when this version cannot read it."""
    cls = BY_KIND.get(kind)
    if cls is None:
        raise UnknownEvent(f"no event kind {kind!r}")
    data = dict(payload or {})
    fields = _fields(cls)
    values: dict[str, Any] = {"deployment_id": deployment_id, "endpoint_name": endpoint_name}
    for f in fields:
        if not f.spread and f.key in data:
            values[f.name] = _decode(f, data.pop(f.key))
    for f in fields:
        if f.spread:
            values[f.name] = data
    try:
        return cls(**values)
    except TypeError as exc:
        raise UnknownEvent(f"a {kind} row this version cannot read: {exc}") from exc


def event_of(row: Any) -> OutboxEvent:
    """The event stored in an ``events`` row (:class:`bot.adapters.store.models.Event`)."""
    return from_row(row.kind, row.deployment_id, row.endpoint_name, row.payload)
