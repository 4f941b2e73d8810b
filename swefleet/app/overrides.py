"""`--set section.key=value`: parse an override, check its key against the config tree (an
unknown key names the closest one), and merge it into the TOML data. Pure: pydantic only."""

from __future__ import annotations

import difflib
import tomllib
import typing

from pydantic import BaseModel


def apply_overrides(data: dict, overrides: list[str], tree: type[BaseModel]) -> list[str]:
    """Merge each `section.key=value` (a TOML value, else the text) into `data`; ValueError
    (one line, naming `--set`) for a malformed item or a key `tree` does not have. Returns the
    keys set, for blaming a value that does not validate on its `--set`."""
    keys = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--set {item!r}: not of the form section.key=value")
        check_key(key, tree)
        set_dotted(data, key, _parse_value(raw.strip()))
        keys.append(key)
    return keys


def check_key(key: str, tree: type[BaseModel]) -> None:
    """ValueError unless `key` names a field of `tree` (a field holding a dict takes any key
    below it)."""
    parts = key.split(".")
    if not all(parts):
        raise ValueError(f"--set {key!r}: not of the form section.key=value")
    model = tree
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            raise ValueError(f"--set {key}: no such config field{_suggestion(key, tree)}")
        if i == len(parts) - 1 or _is_mapping(field.annotation):
            return
        model = _section(field.annotation)
        if model is None:
            raise ValueError(f"--set {key}: {'.'.join(parts[:i + 1])} is a value, not a section")


def dotted_keys(tree: type[BaseModel], prefix: str = "") -> list[str]:
    """Every section and field of `tree` as a dotted name (`orchestrator`, `orchestrator.steps`)."""
    keys = []
    for name, field in tree.model_fields.items():
        keys.append(prefix + name)
        if (section := _section(field.annotation)) is not None:
            keys += dotted_keys(section, f"{prefix}{name}.")
    return keys


def set_dotted(data: dict, key: str, value) -> None:
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        data = data.setdefault(part, {})
        if not isinstance(data, dict):  # bad user input: ValueError is what the CLI reports
            raise ValueError(f"--set {key}: {'.'.join(parts[:i + 1])} is a value, "  # noqa: TRY004
                             "not a section")
    data[parts[-1]] = value


def _suggestion(key: str, tree: type[BaseModel]) -> str:
    close = difflib.get_close_matches(key, dotted_keys(tree), n=1, cutoff=0.6)
    if not close:  # a misspelt field in a right section: the closest of that section's keys
        section, _, last = key.rpartition(".")
        names = [k.rpartition(".")[2] for k in dotted_keys(tree) if k.rpartition(".")[0] == section]
        close = [f"{section}.{m}" if section else m
                 for m in difflib.get_close_matches(last, names, n=1, cutoff=0.6)]
    return f" (did you mean {close[0]}?)" if close else ""


def _section(annotation) -> type[BaseModel] | None:
    """The model class a field holds (also inside `X | None`), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _is_mapping(annotation) -> bool:
    """A dict (also inside `X | None`) or Any: any key below it is the value's own."""
    for candidate in (annotation, *typing.get_args(annotation)):
        origin = typing.get_origin(candidate) or candidate
        if origin is dict or origin is typing.Any:
            return True
    return False


def _parse_value(raw: str):
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
