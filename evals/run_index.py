"""`index.md` of an output folder: its title (the command that wrote it), where to start, a
demo's stages in order, what each entry there is (generated from what is present, plots
included: `run_files.py` describes the files) and the plots that were not drawn and why."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

from swefleet.evals.plots import Plot
from swefleet.evals.run_files import FIRST, LEADS, TABLES, TITLES, run_kind

INDEX = "index.md"
UNKNOWN = "not written by swefleet"

DEMO_STAGES = (
    ("-base", "eval of the starting model on the held-out tasks"),
    ("sft", "SFT warm start"),
    ("-sft", "eval of the SFT checkpoint on the held-out tasks"),
    ("rl", "RL, from the SFT checkpoint when there is one (its files are in the table below)"),
    ("", "eval of the final RL checkpoint on the held-out tasks"),
)
"""A demo's stages in the order they run: (eval folder suffix, or "sft" / "rl"; what it is)."""


def describe(name: str, table: dict[str, str], plots: dict[str, Plot]) -> str:
    """What the entry `name` (a directory name ends with "/") is, by `table` (names, then
    fnmatch patterns in order); a PNG `plots` names: that plot."""
    if name in plots:
        p = plots[name]
        return (f"plot: {p.about}" if p.written
                else f"plot: {p.about} (from an earlier report, not redrawn: {p.missing})")
    if name in table:
        return table[name]
    return next((text for pattern, text in table.items() if fnmatch.fnmatch(name, pattern)),
                UNKNOWN)


def entries(root: Path) -> list[str]:
    """The folder's entries an index lists: all but itself and hidden ones (temp files)."""
    return sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir()
                  if p.name != INDEX and not p.name.startswith("."))


def run_named(root: Path, kind: str) -> dict[str, str]:
    """Entries whose names the run chose: an eval's SWE-bench run report,
    `<model>.<run_id>.json` (named in its eval_run.json)."""
    try:
        meta = json.loads((root / "eval_run.json").read_text()) if kind == "eval" else {}
    except (FileNotFoundError, ValueError):
        return {}
    model, run_id = meta.get("model_name_or_path"), meta.get("run_id")
    if not (isinstance(model, str) and isinstance(run_id, str)):
        return {}
    return {f"{model.replace('/', '__')}.{run_id}.json": "SWE-bench's run report of the first "
            "attempts (`<model>.<run_id>.json`, as the harness names it)"}


def demo_stages(root: Path) -> list[tuple[str, str]]:
    """(entry, what it is) of each stage of the demo in `root` that is there, in the order they
    run; the RL stage's entry is "" (the folder itself)."""
    names = set(entries(root))
    split = _final_eval_split(root)
    evals = sorted(n for n in names if n.startswith("eval-") and n.endswith("/"))
    stages = []
    for key, about in DEMO_STAGES:
        if key == "sft":
            found = ["sft/"] if "sft/" in names else []
        elif key == "rl":
            found = [""] if "metrics.jsonl" in names or "weights/" in names else []
        elif split is not None:
            found = [f"eval-{split}{key}/"] if f"eval-{split}{key}/" in names else []
        else:  # no config: by the folder names (a final eval ends in neither suffix)
            found = [n for n in evals if n.endswith(f"{key}/")] if key else [
                n for n in evals if not n.endswith(("-base/", "-sft/"))]
        stages += [(name, about) for name in found]
    return stages


def _final_eval_split(root: Path) -> str | None:
    try:
        split = json.loads((root / "config.json").read_text())["final_eval"]["split"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(split, str):
        return None
    from swefleet.envs.tasks import split_label

    return split_label(split)


def _demo_lines(root: Path) -> list[str]:
    lines = ["## Stages, in the order they ran", ""]
    for i, (name, about) in enumerate(demo_stages(root), 1):
        where = f"[`{name}`]({name}{INDEX})" if name else "this folder"
        lines.append(f"{i}. {where}: {about}")
    if not (root / "demo_summary.md").exists():
        lines += ["", "`demo_summary.md` is written when the last stage has finished."]
    return [*lines, ""]


def _context(root: Path) -> list[str]:
    """Where this folder sits: a stage of a demo, or a run of a bench."""
    parent = root.resolve().parent
    kind = run_kind(parent) if parent != root.resolve() else None
    if kind == "demo":
        stages = demo_stages(parent)
        names = [name for name, _ in stages]
        mine = f"{root.name}/"
        which = (f"Stage {names.index(mine) + 1} of {len(names)} ({dict(stages)[mine]}) of"
                 if mine in names else "A stage of")
        line = (f"{which} the `swefleet demo` in the folder above: its summary is "
                "[`../demo_summary.md`](../demo_summary.md), its index [`../index.md`]"
                "(../index.md).")
    elif kind == "bench":
        line = ("One run of the `swefleet bench` in the folder above: its report is "
                "[`../bench.md`](../bench.md).")
    else:
        return []
    return [line, ""]


def ordered(names: list[str], kind: str, stages: list[str]) -> list[str]:
    """`names` with the kind's first entries (a demo's summary, then its stage folders) first."""
    first = [n for n in (*FIRST.get(kind, ()), *stages) if n in names]
    return first + [n for n in names if n not in first]


def index_markdown(root: Path, kind: str, plots: list[Plot]) -> str:
    table = {**TABLES[kind], **run_named(root, kind)}
    stages = demo_stages(root) if kind == "demo" else []
    table.update({name: f"stage: {about}, with its own index.md" for name, about in stages
                  if name and name != "sft/"})
    by_name = {p.name: p for p in plots}
    lines = [f"# {TITLES[kind]}", "", LEADS[kind], "", *_context(root)]
    if kind == "demo":
        lines += _demo_lines(root)
    lines += ["What each file here is. `swefleet report run DIR` redraws the plots and this index"
              + (" (the stages' too)." if kind in ("demo", "bench") else "."),
              "", "| file | what it is |", "|---|---|"]
    names = ordered(entries(root), kind, [name for name, _ in stages])
    lines += [f"| `{name}` | {describe(name, table, by_name)} |" for name in names]
    missing = [p for p in plots if not p.written]
    if missing:
        lines += ["", "Plots not drawn, and why (no file is written for a plot without data):", ""]
        lines += [f"- `{p.name}` ({p.about}): {p.missing}" for p in missing]
    return "\n".join(lines) + "\n"
