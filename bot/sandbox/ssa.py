"""Server-side apply bookkeeping for the Kubernetes stand-in (pure data, no I/O).

kmock's emulator merges JSON and knows nothing of field managers, so the
stand-in keeps, per object, which manager owns which field, the way the API
server does (simplified to what kimi-ops relies on):

* a field is a path of map keys; list items that carry a ``name`` are
  addressed by it (``containers``, ``env``, ``ports``…), other lists are atomic;
* an *apply* by manager M conflicts when another manager owns a field M sets to
  a different value (refused unless forced, which moves ownership to M); fields
  M applied before and omits now are removed unless someone else owns them;
* an *update* (merge patch, create) takes ownership of the fields it sets.

Only ``metadata.labels`` and ``metadata.annotations`` of the metadata are
owned; ``status`` never is (it is a subresource).
"""

from __future__ import annotations

import copy
from typing import Any

Path = tuple[Any, ...]  # str for a map key, ("name", value) for a named list item
Owners = dict[str, dict[str, Any]]  # manager -> {"operation": "Apply"|"Update", "fields": set[Path], "apiVersion": str}


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "name" in i for i in value)


def fields(obj: dict[str, Any]) -> set[Path]:
    """Leaf paths a manifest sets (identity, kind and status excluded)."""
    found: set[Path] = set()
    meta = obj.get("metadata") or {}
    for part in ("labels", "annotations"):
        for key in meta.get(part) or {}:
            found.add(("metadata", part, key))
    for key, value in obj.items():
        if key not in {"apiVersion", "kind", "metadata", "status"}:
            _walk(value, (key,), found)
    return found


def _walk(value: Any, prefix: Path, found: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _walk(item, (*prefix, key), found)
    elif _named_list(value):
        for item in value:
            ident = ("name", item["name"])
            found.add((*prefix, ident, "name"))
            for key, sub in item.items():
                if key != "name":
                    _walk(sub, (*prefix, ident, key), found)
    else:
        found.add(prefix)


def _step(container: Any, part: Any) -> Any:
    if isinstance(part, tuple):
        if not isinstance(container, list):
            return None
        return next((i for i in container if isinstance(i, dict) and i.get("name") == part[1]), None)
    return container.get(part) if isinstance(container, dict) else None


def get(obj: dict[str, Any], path: Path) -> Any:
    node: Any = obj
    for part in path:
        node = _step(node, part)
        if node is None:
            return None
    return node


def put(obj: dict[str, Any], path: Path, value: Any) -> None:
    node: Any = obj
    for index, part in enumerate(path[:-1]):
        following = path[index + 1]
        child = _step(node, part)
        if child is None:
            child = [] if isinstance(following, tuple) else {}
            if isinstance(part, tuple):
                child = {"name": part[1]}
                node.append(child)
            else:
                node[part] = child
        node = child
    last = path[-1]
    if isinstance(last, tuple):
        if _step(node, last) is None:
            node.append({"name": last[1]})
    else:
        node[last] = copy.deepcopy(value)


def remove(obj: dict[str, Any], path: Path) -> None:
    parent = get(obj, path[:-1]) if len(path) > 1 else obj
    last = path[-1]
    if last == "name" and len(path) > 1 and isinstance(path[-2], tuple):
        # The item's key goes: the whole item goes with it.
        holder = get(obj, path[:-2])
        if isinstance(holder, list):
            holder[:] = [i for i in holder if not (isinstance(i, dict) and i.get("name") == path[-2][1])]
    elif isinstance(parent, dict) and not isinstance(last, tuple):
        parent.pop(last, None)


def conflicts(owners: Owners, manager: str, live: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, Path]]:
    """(other manager, path) for each field set to a different value than another manager's."""
    found = []
    for other, entry in sorted(owners.items()):
        if other == manager:
            continue
        for path in sorted(fields(config) & entry["fields"], key=repr):
            if get(live, path) != get(config, path):
                found.append((other, path))
    return found


def apply(
    owners: Owners, manager: str, api_version: str, live: dict[str, Any], config: dict[str, Any], force: bool
) -> dict[str, Any]:
    """The object after ``manager`` applies ``config`` (``owners`` updated in place); conflicts checked by the caller."""
    wanted = fields(config)
    if force:
        for other, entry in owners.items():
            if other != manager:
                entry["fields"] -= {p for p in wanted if get(live, p) != get(config, p)}
    new = copy.deepcopy(live)
    before = owners.get(manager, {}).get("fields", set()) if owners.get(manager, {}).get("operation") == "Apply" else set()
    others = set().union(*(e["fields"] for m, e in owners.items() if m != manager)) if owners else set()
    for path in sorted(before - wanted - others, key=lambda p: -len(p)):
        remove(new, path)
    for path in sorted(wanted, key=len):
        put(new, path, get(config, path))
    _order(new, config)
    owners[manager] = {"operation": "Apply", "apiVersion": api_version, "fields": wanted}
    _drop_empty(owners)
    return new


def _order(live: Any, config: Any) -> None:
    """Named list items follow the applied configuration's order (the others keep theirs, after them)."""
    if isinstance(config, dict) and isinstance(live, dict):
        for key, value in config.items():
            _order(live.get(key), value)
    elif _named_list(config) and isinstance(live, list):
        rank = {item["name"]: i for i, item in enumerate(config)}
        live.sort(key=lambda item: rank.get(item.get("name") if isinstance(item, dict) else None, len(rank)))
        for item in config:
            _order(next((i for i in live if isinstance(i, dict) and i.get("name") == item["name"]), None), item)


def update(owners: Owners, manager: str, api_version: str, patch: dict[str, Any]) -> None:
    """An update (merge patch or create) takes the fields it sets from everyone else."""
    taken = {p for p in fields(patch) if get(patch, p) is not None}
    for other, entry in owners.items():
        if other != manager:
            entry["fields"] -= taken
    entry = owners.setdefault(manager, {"operation": "Update", "apiVersion": api_version, "fields": set()})
    if entry["operation"] == "Update":
        entry["fields"] |= taken
    else:
        owners[f"{manager}-update"] = {"operation": "Update", "apiVersion": api_version, "fields": taken}
    _drop_empty(owners)


def _drop_empty(owners: Owners) -> None:
    for manager in [m for m, e in owners.items() if not e["fields"]]:
        del owners[manager]


def describe(path: Path) -> str:
    """``.spec.containers[name="vllm"].image`` — the API server's spelling of a field."""
    out = ""
    for part in path:
        out += f'[name="{part[1]}"]' if isinstance(part, tuple) else f".{part}"
    return out


def fields_v1(paths: set[Path]) -> dict[str, Any]:
    """The ``FieldsV1`` form shown in ``metadata.managedFields``."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for part in path:
            key = f'k:{{"name":"{part[1]}"}}' if isinstance(part, tuple) else f"f:{part}"
            node = node.setdefault(key, {})
    return tree
