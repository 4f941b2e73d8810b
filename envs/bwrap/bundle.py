"""Move task images to a machine without Docker: rootfs bundles for the bwrap backend.

    # where Docker runs: build the task images as `swefleet eval` would, save their layers once
    python -m swefleet.envs.bwrap.bundle export --tasks envs/data/pypi/tasks.jsonl --out bundle/
    # copy bundle/ (manifest.json, bwrap, pack.000 ...: parts of <= 59 MiB) to the target, then
    python -m swefleet.envs.bwrap.bundle import bundle/ --cache /var/cache/swefleet-rootfs
    swefleet eval --tasks /var/cache/swefleet-rootfs/tasks/pypi.jsonl ...  # [envs] backend="bwrap"

A bundle holds each distinct image layer once (`docker save`: the base image's layer is shared
by every task image, a package's repository layer by its tasks), compressed (xz by default),
appended into one pack split into parts; `manifest.json` lists the parts (size, sha256), the
layers, the images (name, id, env, layer chain) and the task sets, whose records name their
images, so the target needs neither Docker nor the recipes' downloads. Import checks every part
first, then builds each image's rootfs in the layout of `envs/bwrap/rootfs.py` (`<cache>/<image
id>/{rootfs,env.json}` plus `by-name/` links): a hardlinked copy (`cp -al`) of the rootfs of its
longest already-built layer prefix plus the remaining layers; unfinished work lives under
`<cache>/.import-*` and is removed whatever happens. Bundles are trusted artefacts (their
files become sandbox root filesystems); the checksums catch damage in transit, not forgery.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path

from swefleet.envs.bwrap.layers import apply_layer, compress, decompress, default_compression
from swefleet.envs.bwrap.pack import BundleError, PackWriter, check_parts, open_blob, sha256_file
from swefleet.envs.bwrap.rootfs import _mkdirs, _name_link, default_dir

FORMAT = 1
PART_BYTES = 59 << 20
MOUNT_POINTS = ("proc", "dev", "sys", "tmp")
#: Task fields that only say how to build the image; dropped once `image` names it.
_BUILD_FIELDS = ("source_dir", "source_patch", "recipe")


def set_name(tasks_file: Path) -> str:
    """`envs/data/pypi/tasks.jsonl` -> `pypi`; `x/mine.jsonl` -> `mine`."""
    return tasks_file.parent.name if tasks_file.stem == "tasks" else tasks_file.stem


# ---------------------------------------------------------------- export (needs Docker)

def _resolved_tasks(task_files: list[Path], base_image: str) -> dict[str, list[dict]]:
    """Each task set's records with `image` set, the images built as `swefleet eval` does."""
    from swefleet.envs.images import build_base_image
    from swefleet.envs.tasks import load_tasks, prepare_task_images

    build_base_image(base_image)
    sets: dict[str, list[dict]] = {}
    for path in task_files:
        name = set_name(path)
        if name in sets:
            raise BundleError(f"two task sets are named {name!r}; rename one file")
        tasks = prepare_task_images(load_tasks(path), path, base_image)
        records = [t.model_dump(mode="json", by_alias=True) for t in tasks]
        sets[name] = [{k: v for k, v in r.items() if k not in _BUILD_FIELDS} for r in records]
    return sets


def _saved_images(images: list[str], tmp: Path) -> tuple[Path, list[dict]]:
    """`docker save` of all images at once (shared layers stored once), unpacked in `tmp`."""
    saved = tmp / "saved"
    saved.mkdir()
    save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(saved)], stdin=save.stdout,
                           capture_output=True, check=False)
    save.wait()
    if save.returncode or untar.returncode:
        raise BundleError(f"docker save failed: {untar.stderr.decode(errors='replace')[-500:]}")
    return saved, json.loads((saved / "manifest.json").read_text())


def _bwrap_binary(tmp: Path) -> Path:
    """Debian's bubblewrap binary from its .deb (`apt-get download`, else apt's cache)."""
    debs = tmp / "debs"
    debs.mkdir()
    subprocess.run(["apt-get", "download", "bubblewrap"], cwd=debs, capture_output=True,
                   check=False)
    found = sorted(debs.glob("bubblewrap_*.deb")) or sorted(
        Path("/var/cache/apt/archives").glob("bubblewrap_*.deb"))
    if not found:
        raise BundleError("no bubblewrap .deb (apt-get download bubblewrap failed); "
                          "pass --no-bwrap to leave the binary out")
    subprocess.run(["dpkg", "-x", str(found[-1]), str(tmp / "deb")], check=True)
    return tmp / "deb" / "usr" / "bin" / "bwrap"


def export_bundle(task_files: list[Path], out: Path, *, compression: str = "",
                  part_bytes: int = PART_BYTES, base_image: str = "",
                  with_bwrap: bool = True) -> dict:
    """Write the bundle of the task sets' images to `out` (new or empty); its manifest."""
    from swefleet.envs.images import DEFAULT_BASE_IMAGE

    compression = compression or default_compression()
    if out.exists() and any(out.iterdir()):
        raise BundleError(f"{out}: not empty")
    out.mkdir(parents=True, exist_ok=True)
    sets = _resolved_tasks(task_files, base_image or DEFAULT_BASE_IMAGE)
    names = list(dict.fromkeys(r["image"] for records in sets.values() for r in records))
    manifest: dict = {"format": FORMAT, "compression": compression, "images": [],
                      "layers": {}, "task_sets": {}}
    with tempfile.TemporaryDirectory(prefix="swefleet-bundle-") as t, \
            PackWriter(out, part_bytes) as pack:
        tmp = Path(t)
        saved, entries = _saved_images(names, tmp)
        by_tag = {tag: e for e in entries for tag in e.get("RepoTags") or []}
        for name in names:
            if name not in by_tag:
                raise BundleError(f"docker save did not return {name}")
            entry = by_tag[name]
            config = json.loads((saved / entry["Config"]).read_text())
            diff_ids = config["rootfs"]["diff_ids"]
            for diff_id, layer in zip(diff_ids, entry["Layers"], strict=True):
                if diff_id not in manifest["layers"]:
                    blob = tmp / "blob"
                    compress(saved / layer, blob, compression)
                    manifest["layers"][diff_id] = pack.add(blob)
                    blob.unlink()
            cfg = config.get("config") or {}
            env = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
            manifest["images"].append({
                "name": name, "id": "sha256:" + Path(entry["Config"]).stem.split(":")[-1],
                "env": env, "workdir": cfg.get("WorkingDir") or "", "layers": diff_ids})
        for set_, records in sets.items():
            raw = tmp / "tasks.jsonl"
            raw.write_text("".join(json.dumps(r) + "\n" for r in records))
            compress(raw, tmp / "blob", compression)
            manifest["task_sets"][set_] = pack.add(tmp / "blob")
        if with_bwrap:
            shutil.copy2(_bwrap_binary(tmp), out / "bwrap")
            manifest["bwrap"] = {"size": (out / "bwrap").stat().st_size,
                                 "sha256": sha256_file(out / "bwrap")}
    manifest["parts"], manifest["pack_bytes"] = pack.parts, pack.offset
    (out / "manifest.json.tmp").write_text(json.dumps(manifest, indent=1))
    (out / "manifest.json.tmp").rename(out / "manifest.json")  # last: a bundle is complete
    return manifest


# ---------------------------------------------------------------- import (no Docker)

def read_manifest(bundle: Path) -> dict:
    path = bundle / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleError(f"{path}: missing (is {bundle} a bundle directory?)") from None
    except ValueError as e:
        raise BundleError(f"{path}: not JSON ({e})") from e
    if manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: format {manifest.get('format')!r}, this swefleet reads "
                          f"{FORMAT}")
    return manifest


def check_bundle(bundle: Path) -> dict:
    """The manifest, once every part (and the bwrap binary, if any) is whole."""
    manifest = read_manifest(bundle)
    check_parts(bundle, manifest)
    if manifest.get("bwrap"):
        path = bundle / "bwrap"
        if not path.is_file() or sha256_file(path) != manifest["bwrap"]["sha256"]:
            raise BundleError(f"{path}: missing or its sha256 differs from the manifest")
    return manifest


class _Importer:
    def __init__(self, bundle: Path, manifest: dict, cache: Path, work: Path) -> None:
        self.bundle, self.manifest, self.cache, self.work = bundle, manifest, cache, work
        self.chains: dict[tuple[str, ...], Path] = {}
        self.uses = Counter(tuple(img["layers"][:n]) for img in manifest["images"]
                            for n in range(1, len(img["layers"]) + 1))

    def image(self, img: dict) -> Path:
        entry = self.cache / img["id"].replace(":", "_")
        if not (entry / "env.json").is_file():
            self._build(img, entry)
        self.chains.setdefault(tuple(img["layers"]), entry / "rootfs")
        link = _name_link(self.cache, img["name"])
        tmp_link = link.with_name(f".{link.name}.{uuid.uuid4().hex[:8]}")
        tmp_link.symlink_to(f"../{entry.name}")
        tmp_link.replace(link)
        return entry

    def _build(self, img: dict, entry: Path) -> None:
        layers = img["layers"]
        done = next((n for n in range(len(layers), 0, -1) if tuple(layers[:n]) in self.chains), 0)
        tmp = self.work / uuid.uuid4().hex[:12]
        tmp.mkdir()
        rootfs = tmp / "rootfs"
        if done:
            _run(["cp", "-a", "-l", str(self.chains[tuple(layers[:done])]), str(rootfs)])
        else:
            rootfs.mkdir()
        for n in range(done, len(layers)):
            self._apply(layers[n], rootfs)
            prefix = tuple(layers[: n + 1])
            if n + 1 < len(layers) and self.uses[prefix] > 1 and prefix not in self.chains:
                snap = self.work / f"chain-{uuid.uuid4().hex[:12]}"
                _run(["cp", "-a", "-l", str(rootfs), str(snap)])
                self.chains[prefix] = snap
        for d in MOUNT_POINTS:
            (rootfs / d).mkdir(exist_ok=True)
        (tmp / "env.json").write_text(json.dumps({"env": img["env"], "workdir": img["workdir"]}))
        os.chmod(tmp, 0o755)
        try:
            tmp.rename(entry)
        except OSError:  # another import or export made it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)

    def _apply(self, diff_id: str, rootfs: Path) -> None:
        tar = self.work / "layer.tar"
        with open_blob(self.bundle, self.manifest, self.manifest["layers"][diff_id]) as blob:
            decompress(blob, tar, self.manifest["compression"])
        try:
            apply_layer(tar, rootfs)
        finally:
            tar.unlink()

    def task_sets(self) -> dict[str, Path]:
        out = {}
        (self.cache / "tasks").mkdir(exist_ok=True, mode=0o755)
        for name, ref in self.manifest["task_sets"].items():
            dest = self.cache / "tasks" / f"{name}.jsonl"
            tmp = self.work / f"tasks-{name}"
            with open_blob(self.bundle, self.manifest, ref) as blob:
                decompress(blob, tmp, self.manifest["compression"])
            tmp.chmod(0o644)
            tmp.replace(dest)
            out[name] = dest
        return out


def import_bundle(bundle: Path, cache: Path) -> dict:
    """Check `bundle`, then unpack its images into the rootfs cache `cache`, its task sets to
    `<cache>/tasks/<name>.jsonl` and its bwrap binary to `<cache>/bin/bwrap`. Returns
    {"images": [entry dirs], "task_sets": {name: path}, "bwrap": path or ""}."""
    manifest = check_bundle(bundle)
    _mkdirs(cache / "by-name")
    work = cache / f".import-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    try:
        importer = _Importer(bundle, manifest, cache, work)
        entries = [importer.image(img) for img in manifest["images"]]
        sets = importer.task_sets()
        bwrap = ""
        if manifest.get("bwrap"):
            (cache / "bin").mkdir(exist_ok=True, mode=0o755)
            tmp = work / "bwrap"
            shutil.copyfile(bundle / "bwrap", tmp)
            tmp.chmod(0o755)
            tmp.replace(cache / "bin" / "bwrap")
            bwrap = str(cache / "bin" / "bwrap")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"images": entries, "task_sets": sets, "bwrap": bwrap}


def _run(argv: list[str]) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode:
        raise BundleError(f"{' '.join(argv[:3])}: {res.stderr.strip()[-500:]}")


# ---------------------------------------------------------------- command line

def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m swefleet.envs.bwrap.bundle", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="bundle task sets' images (needs Docker)")
    ex.add_argument("--tasks", action="append", required=True, type=Path,
                    help="task file (repeat for several sets)")
    ex.add_argument("--out", required=True, type=Path, help="bundle directory (new or empty)")
    ex.add_argument("--compress", choices=["xz", "zstd", "gzip"], default="",
                    help="layer compression (default xz: any target can undo it)")
    ex.add_argument("--part-mb", type=int, default=PART_BYTES >> 20,
                    help="part size in MiB (default 59)")
    ex.add_argument("--base-image", default="", help="base image of the task images")
    ex.add_argument("--no-bwrap", action="store_true", help="leave the bwrap binary out")
    im = sub.add_parser("import", help="unpack a bundle into a rootfs cache (no Docker)")
    im.add_argument("bundle", type=Path)
    im.add_argument("--cache", type=Path, default=None,
                    help="rootfs cache = [envs.bwrap] cache_dir (default <tmp>/swefleet-bwrap/"
                         "rootfs)")
    ch = sub.add_parser("check", help="check a bundle's parts against its manifest")
    ch.add_argument("bundle", type=Path)
    args = p.parse_args(argv)
    try:
        if args.cmd == "export":
            m = export_bundle(args.tasks, args.out, compression=args.compress,
                              part_bytes=args.part_mb << 20, base_image=args.base_image,
                              with_bwrap=not args.no_bwrap)
            print(f"{args.out}: {len(m['images'])} images, {len(m['layers'])} layers, "
                  f"{len(m['parts'])} parts, {_size(m['pack_bytes'])} ({m['compression']})")
        elif args.cmd == "import":
            cache = (args.cache or default_dir("rootfs")).absolute()
            res = import_bundle(args.bundle, cache)
            print(f"{cache}: {len(res['images'])} images")
            for name, path in res["task_sets"].items():
                print(f"task set {name}: {path}")
            if res["bwrap"]:
                print(f"bwrap: {res['bwrap']}  ([envs.bwrap] bwrap_path)")
        else:
            m = check_bundle(args.bundle)
            print(f"{args.bundle}: {len(m['parts'])} parts ok, {_size(m['pack_bytes'])}")
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
