"""The config reference, generated from the config classes' field docstrings.

`python -m swefleet.app.config_doc > docs/config.md` writes the reference (a unit test checks that
the checked-in file is current); `swefleet config show [--config X]` prints a loaded config as
TOML with each field's doc as a comment above it. Only pydantic and the config modules are
imported here.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel

REGENERATE = "python -m swefleet.app.config_doc > docs/config.md"


@dataclass(frozen=True)
class Node:
    """One field of the tree: `model` is set when the field is a section (a nested config),
    `many` when it is a list of sections (`[[envs.hosts]]`)."""

    key: str
    type_name: str
    doc: str
    model: type[BaseModel] | None = None
    many: bool = False


@cache
def attribute_docs(cls: type) -> dict[str, str]:
    """`{field: docstring}` of the string literals right below each annotated attribute of
    `cls` and its bases (the project's convention for documenting config fields)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass.__module__.startswith("pydantic"):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, body[1:] + [None]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _section_model(annotation) -> tuple[type[BaseModel] | None, bool]:
    """The config class a field holds (directly, optionally, or as a list of them)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple) and args:
        model, _ = _section_model(args[0])
        return model, model is not None
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            model, many = _section_model(arg)
            if model is not None:
                return model, many
    return None, False


def type_name(annotation) -> str:
    """A short, readable type: `int | None`, `"bash" | "tools"`, `list[str]`."""
    if annotation is type(None):
        return "None"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def fields(cls: type[BaseModel]) -> list[Node]:
    """The fields of one config class, in declaration order."""
    docs = attribute_docs(cls)
    nodes = []
    for key, info in cls.model_fields.items():
        model, many = _section_model(info.annotation)
        doc = info.description or docs.get(key, "")
        if not doc and model is not None:
            doc = inspect.cleandoc(model.__doc__ or "")
        nodes.append(Node(key, type_name(info.annotation), doc, model, many))
    return nodes


def undocumented(cls: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Dotted names of the fields with no doc anywhere in the tree below `cls`."""
    for node in fields(cls):
        if not node.doc:
            yield prefix + node.key
        if node.model is not None:
            yield from undocumented(node.model, f"{prefix}{node.key}.")


# --- docs/config.md -------------------------------------------------------------------------


def markdown(root: type[BaseModel] | None = None) -> str:
    """The whole reference as Markdown: one heading per section, one entry per field."""
    if root is None:
        from swefleet.app.config import RunConfig

        root = RunConfig
    lines = [
        "# Config reference",
        "",
        "Generated from the field docstrings of the config classes; do not edit by hand. After",
        f"changing a config class, run `{REGENERATE}`.",
        "",
        "A run's config is one TOML file (`swefleet rl --config FILE`, examples in `configs/`);",
        "`--set section.key=value` overrides one field; unknown keys are errors. `swefleet config",
        "show --config FILE` prints a config with all its values and these docs as comments.",
        "",
    ]
    _markdown_section(root, "", lines)
    return "\n".join(lines).rstrip() + "\n"


def _markdown_section(cls: type[BaseModel], prefix: str, lines: list[str],
                      many: bool = False) -> None:
    name = prefix.rstrip(".")
    title = (f"`[[{name}]]`" if many else f"`[{name}]`") if prefix else "Top level"
    lines += [f"## {title}", ""]
    if cls.__doc__:
        lines += [inspect.cleandoc(cls.__doc__), ""]
    nodes = fields(cls)
    for node in nodes:
        if node.model is None or node.many:
            default = _default_text(cls, node.key)
            head = f"- **`{node.key}`** (`{node.type_name}`, default {default})"
            lines.append(f"{head}: {_one_paragraph(node.doc)}" if node.doc else head)
    lines.append("")
    for node in nodes:
        if node.model is not None:
            _markdown_section(node.model, f"{prefix}{node.key}.", lines, node.many)


def _default_text(cls: type[BaseModel], key: str) -> str:
    info = cls.model_fields[key]
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return f"`{_toml_value(value) if value is not None else 'None'}`"


def _one_paragraph(doc: str) -> str:
    return " ".join(doc.split())


# --- swefleet config show -------------------------------------------------------------------


def show(cfg: BaseModel) -> str:
    """`cfg` as TOML, each field preceded by its doc as comments (unset fields commented out:
    TOML has no null). Loading the output gives back the same config."""
    lines: list[str] = []
    _show_table(cfg, "", lines, header=None)
    return "\n".join(lines).rstrip() + "\n"


def _show_table(obj: BaseModel, prefix: str, lines: list[str], header: str | None) -> None:
    if header is not None:
        doc = inspect.cleandoc(type(obj).__doc__ or "")
        lines += [""] + _comment(doc) + [header]
    nodes = fields(type(obj))
    for node in nodes:
        if node.model is not None:
            continue
        value = getattr(obj, node.key)
        lines += _comment(node.doc)
        if value is None:
            lines.append(f"# {node.key} = (unset)")
        else:
            lines.append(f"{_toml_key(node.key)} = {_toml_value(_plain(value))}")
    for node in nodes:
        if node.model is None:
            continue
        value = getattr(obj, node.key)
        name = f"{prefix}{_toml_key(node.key)}"
        if node.many:
            for item in value or []:
                _show_table(item, f"{name}.", lines, header=f"[[{name}]]")
            if not value:
                lines += [""] + _comment(node.doc) + [f"# [[{name}]]: none"]
        elif value is None:
            lines += [""] + _comment(node.doc) + [f"# [{name}]: unset"]
        else:
            _show_table(value, f"{name}.", lines, header=f"[{name}]")


def _comment(doc: str) -> list[str]:
    out = []
    for para in doc.split("\n\n"):
        out += textwrap.wrap(" ".join(para.split()), 96) or [""]
    return [f"# {line}".rstrip() for line in out if doc]


def _plain(value):
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):  # enums
        return value.value
    return value


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}"
                          for k, v in value.items() if v is not None)
        return "{" + (f" {items} " if items else "") + "}"
    return json.dumps(str(value))


def show_cli(args) -> int:
    """`swefleet config show`: the merged config (file + `--set`) with each field's doc."""
    from swefleet.app.config import load_config

    cfg = load_config(args.config or "", args.set, topology=False)
    sys.stdout.write(show(cfg))
    return 0


if __name__ == "__main__":
    sys.stdout.write(markdown())
