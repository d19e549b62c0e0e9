"""YAML configs validated into typed pydantic models (`extra="forbid"`), with `--set a.b=value`
overrides and a stable sha256 of the resolved config.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from pretrain.errors import ConfigError
from pretrain.manifest import canonical_json, sha256_bytes


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors, values are immutable, and a number
    must be finite (YAML's `.inf`, `.nan` and `1e999` are refused: a NaN threshold compares
    false with everything, which silently turns a filter off)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


MAX_TIMEOUT_S = threading.TIMEOUT_MAX
"""The longest time limit a config may set (about 292 years): Python's lock waits, which the
guards on Ray phases use, refuse a longer one with OverflowError."""


M = TypeVar("M", bound=BaseModel)


MAX_YAML_ALIASES = 100
"""Aliases (`*name`) one YAML document may hold: configs and recipes need a few `<<: *base`."""
MAX_YAML_NODES = 100_000
"""Nodes a YAML document may expand to once every alias is followed (a "billion laughs" document
is a few hundred bytes that expands to 10^9 nodes in every copy, dump and hash of the config)."""


class _Refused(yaml.YAMLError):
    """A YAML document this project does not read (message: where and what to do)."""


class _BoundedLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that names one key twice (YAML itself keeps the
    last silently; keys a `<<:` merge brings in may still be overridden), more than
    MAX_YAML_ALIASES aliases, a document that would expand to more than MAX_YAML_NODES nodes,
    and an alias inside its own anchor (a cycle)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _Refused(
                        f"line {line}: key {key!r} appears twice (first at line {seen[key]}); "
                        "keep one"
                    )
                seen[key] = line
            except TypeError:  # an unhashable key: the safe loader's own error follows
                continue
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                line = self.peek_event().start_mark.line + 1
                raise _Refused(
                    f"line {line}: more than {MAX_YAML_ALIASES} aliases (*name); "
                    "write the values out"
                )
        return super().compose_node(parent, index)

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None:
            _expanded_size(node, {}, set())
        return node


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """Nodes `node` stands for with every alias followed; raises past MAX_YAML_NODES or on a
    cycle. Shared nodes are counted once per reference, as every copy of the data will."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        line = node.start_mark.line + 1
        raise _Refused(f"line {line}: an alias refers to a value that contains it (a cycle)")
    open_.add(key)
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded_size(child, sizes, open_) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            total += _expanded_size(k, sizes, open_) + _expanded_size(v, sizes, open_)
    if total > MAX_YAML_NODES:
        raise _Refused(
            f"line {node.start_mark.line + 1}: aliases expand the document past {MAX_YAML_NODES:,} values; "
            "use fewer or smaller anchors"
        )
    open_.discard(key)
    sizes[key] = total
    return total


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """A YAML config as a mapping, through the bounded safe loader; a one-line ConfigError else."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"config file {path} does not exist; pass a path to a YAML config "
            "(examples are in configs/)"
        )
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_BoundedLoader)  # noqa: S506
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}); save the config as UTF-8"
        ) from None
    except _Refused as exc:
        raise ConfigError(f"{path} {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read; flatten it") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" line {where.line + 1}" if where else ""
        raise ConfigError(
            f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of keys, got {type(data).__name__}"
        )
    return data


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply `a.b=value` overrides (value parsed as YAML) to a nested dict, returning a new dict.

    A path part indexes a list when the node there is a list: `components.0.weight=0.3`,
    `components.-1.weight=0.3` (from the end); a last part `+` appends:
    `components.+={name: x, weight: 0.1}`; the bracket form `components[0].weight` means the same.
    The result is validated like the file itself.
    """
    result = _deep_copy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r} is not of the form a.b=value")
        value = _override_value(raw, item)
        parts = _BRACKETS.sub(r".\1", key.strip()).split(".")
        node: Any = result
        for depth, part in enumerate(parts[:-1]):
            node = _child(node, part, parts[depth + 1], item)
        _assign(node, parts[-1], value, item)
    return result


_BRACKETS = re.compile(r"\[(-?[0-9]+|\+)\]")


def _override_value(raw: str, item: str) -> Any:
    """An override's value parsed as YAML (bounded like a file), else the raw string."""
    if not raw.strip():
        return raw
    try:
        return yaml.load(raw, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader)
    except _Refused as exc:
        raise ConfigError(f"--set {item[:60]!r}: {exc}") from None
    except (yaml.YAMLError, RecursionError):
        return raw


def _list_index(node: list[Any], part: str, item: str) -> int:
    """The list position `part` names (negative counts from the end), or a one-line error."""
    try:
        index = int(part)
    except ValueError:
        raise ConfigError(
            f"--set {item!r}: {part!r} indexes a list of {len(node)} items; use 0..{len(node) - 1}, "
            "-1 for the last, or + (last part only) to append"
        ) from None
    if not -len(node) <= index < len(node):
        raise ConfigError(
            f"--set {item!r}: index {index} is out of range for a list of {len(node)} items; "
            "use + as the last part to append"
        )
    return index


def _child(node: Any, part: str, next_part: str, item: str) -> Any:
    """Step one path part down, creating a section only where a mapping is expected."""
    if isinstance(node, list):
        return node[_list_index(node, part, item)]
    child = node.get(part)
    if child is None:
        if next_part == "+" or next_part.lstrip("-").isdigit():
            raise ConfigError(
                f"--set {item!r}: {part!r} is not a list in this config; set the whole list, "
                f"e.g. --set {part}='[...]'"
            )
        child = node[part] = {}
    if not isinstance(child, (dict, list)):
        raise ConfigError(f"--set {item!r}: {part!r} is a value, not a section or list")
    return child


def _assign(node: Any, part: str, value: Any, item: str) -> None:
    if isinstance(node, list):
        if part == "+":
            node.append(value)
        else:
            node[_list_index(node, part, item)] = value
    elif part == "+":
        raise ConfigError(f"--set {item!r}: + appends to a list, and this is a section")
    else:
        node[part] = value


def _deep_copy(data: Any) -> Any:
    """Unlike copy.deepcopy, a YAML alias becomes its own copy: `--set` on one changes one."""
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the field path `loc` (for listing valid keys)."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part)) if not isinstance(part, int) else None
        if field is None:
            if isinstance(part, int):
                continue
            return None
        current = _inner_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def validation_message(model: type[BaseModel], exc: ValidationError, source: str) -> str:
    """One line: the field, the value and the fix, for the first error pydantic found."""
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    field = ".".join(str(p) for p in loc) or "(top level)"
    more = len(exc.errors()) - 1
    suffix = f" (+{more} more error{'s' if more > 1 else ''})" if more else ""
    if err["type"] == "extra_forbidden":
        owner = _model_at(model, loc[:-1])
        valid = ", ".join(owner.model_fields) if owner else "see the example configs"
        return f"{source}: unknown key {field!r}; valid keys here: {valid}{suffix}"
    if err["type"] == "missing":
        return f"{source}: required key {field!r} is missing{suffix}"
    value = err.get("input")
    return f"{source}: {field} = {value!r}: {err['msg']}{suffix}"


def parse_config(model: type[M], data: Mapping[str, Any], source: str = "config") -> M:
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(validation_message(model, exc, source)) from None


def load_config(model: type[M], path: str | os.PathLike | None, overrides: Iterable[str] = ()) -> M:
    """Read YAML (or start empty when `path` is None), apply overrides, validate."""
    data = read_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides)
    return parse_config(model, data, source=str(path) if path is not None else "config")


def config_dict(config: BaseModel) -> dict[str, Any]:
    return config.model_dump(mode="json")


def config_sha256(config: BaseModel | Mapping[str, Any]) -> str:
    data = config_dict(config) if isinstance(config, BaseModel) else dict(config)
    return sha256_bytes(canonical_json(data))


def dump_resolved(config: BaseModel) -> str:
    """The `--dry-run` text: the resolved config as YAML and its sha256."""
    body = yaml.safe_dump(config_dict(config), sort_keys=False, allow_unicode=True)
    return f"{body}# config_sha256: {config_sha256(config)}\n"
