"""Rootfs bundles (`envs/bwrap/bundle.py`, `pack.py`, `layers.py`) without Docker: parts,
manifest checks, layers with whiteouts, hardlinked images, and failures that leave nothing."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from swefleet.envs.bwrap.bundle import import_bundle, main
from swefleet.envs.bwrap.layers import compress
from swefleet.envs.bwrap.pack import BundleError, PackWriter, check_parts, open_blob

pytestmark = [pytest.mark.unit]


def _pack(tmp_path: Path, blobs: list[bytes], part_bytes: int) -> tuple[Path, dict, list]:
    out = tmp_path / "bundle"
    out.mkdir()
    refs = []
    with PackWriter(out, part_bytes) as w:
        for i, data in enumerate(blobs):
            (tmp_path / f"b{i}").write_bytes(data)
            refs.append(w.add(tmp_path / f"b{i}"))
    return out, {"parts": w.parts, "pack_bytes": w.offset}, refs


def test_blobs_split_into_parts_and_read_back(tmp_path):
    blobs = [os.urandom(2500), b"", os.urandom(10), os.urandom(999)]
    out, manifest, refs = _pack(tmp_path, blobs, part_bytes=1000)
    sizes = [p["size"] for p in manifest["parts"]]
    assert sizes == [1000, 1000, 1000, 509] and min(os.listdir(out)) == "pack.000"
    check_parts(out, manifest)
    for data, ref in zip(blobs, refs, strict=True):
        with open_blob(out, manifest, ref) as f:
            assert f.read() == data


@pytest.mark.parametrize("damage,message", [
    (lambda p: p.write_bytes(p.read_bytes()[:-1]), "truncated"),
    (lambda p: p.write_bytes(b"x" + p.read_bytes()[1:]), "corrupted"),
    (lambda p: p.unlink(), "missing"),
])
def test_damaged_part_is_named(tmp_path, damage, message):
    out, manifest, _ = _pack(tmp_path, [os.urandom(3000)], part_bytes=1000)
    damage(out / "pack.001")
    with pytest.raises(BundleError, match=message) as e:
        check_parts(out, manifest)
    assert "pack.001" in str(e.value)


def test_blob_with_a_wrong_sha_fails_when_read(tmp_path):
    out, manifest, refs = _pack(tmp_path, [b"abc" * 100], part_bytes=1000)
    with pytest.raises(BundleError, match="sha256"), \
            open_blob(out, manifest, {**refs[0], "sha256": "0" * 64}) as f:
        f.read()


def _layer(entries: list[tuple[str, bytes | None]]) -> bytes:
    """A layer tar: (name, data) files, (name/, None) directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name.rstrip("/"))
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _bundle(tmp_path: Path) -> Path:
    """Two images over one base layer: `a` adds a file, `b` removes one and replaces another."""
    layers = {
        "sha256:base": _layer([("etc/", None), ("etc/os", b"debian\n"), ("keep", b"k"),
                               ("gone/", None), ("gone/x", b"x"), ("opq/", None),
                               ("opq/old", b"o")]),
        "sha256:a": _layer([("testbed/", None), ("testbed/a.py", b"A\n")]),
        "sha256:b": _layer([(".wh.gone", b""), ("opq/", None), ("opq/.wh..wh..opq", b""),
                            ("opq/new", b"n"), ("keep", b"changed")]),
    }
    out = tmp_path / "bundle"
    out.mkdir()
    manifest: dict = {"format": 1, "compression": "gzip", "layers": {}, "task_sets": {},
                      "images": [
                          {"name": "img:a", "id": "sha256:aaaa", "env": {"PATH": "/bin"},
                           "workdir": "/testbed", "layers": ["sha256:base", "sha256:a"]},
                          {"name": "img:b", "id": "sha256:bbbb", "env": {}, "workdir": "/",
                           "layers": ["sha256:base", "sha256:b"]}]}
    tasks = json.dumps({"instance_id": "t-1", "image": "img:a"}).encode() + b"\n"
    with PackWriter(out, 700) as w:
        for key, data in [*layers.items(), ("tasks", tasks)]:
            (tmp_path / "raw").write_bytes(data)
            compress(tmp_path / "raw", tmp_path / "blob", "gzip")
            ref = w.add(tmp_path / "blob")
            if key == "tasks":
                manifest["task_sets"]["mini"] = ref
            else:
                manifest["layers"][key] = ref
    manifest["parts"], manifest["pack_bytes"] = w.parts, w.offset
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_import_builds_each_image_sharing_files(tmp_path):
    cache = tmp_path / "cache"
    res = import_bundle(_bundle(tmp_path), cache)
    a, b = (cache / "by-name" / "img_a").resolve(), (cache / "by-name" / "img_b").resolve()
    assert res["images"] == [cache / "sha256_aaaa", cache / "sha256_bbbb"] == [a, b]
    assert (a / "rootfs/testbed/a.py").read_bytes() == b"A\n"
    assert json.loads((a / "env.json").read_text()) == {"env": {"PATH": "/bin"},
                                                        "workdir": "/testbed"}
    assert (a / "rootfs/keep").read_bytes() == b"k"  # b's change did not reach a's copy
    assert (b / "rootfs/keep").read_bytes() == b"changed"
    assert not (b / "rootfs/gone").exists() and (a / "rootfs/gone/x").exists()
    assert sorted(os.listdir(b / "rootfs/opq")) == ["new"]
    assert not (b / "rootfs/testbed").exists() and (b / "rootfs/proc").is_dir()
    assert (a / "rootfs/etc/os").stat().st_ino == (b / "rootfs/etc/os").stat().st_ino
    assert (cache / "tasks/mini.jsonl").read_text().startswith('{"instance_id": "t-1"')
    assert not [p for p in os.listdir(cache) if p.startswith(".import")]
    again = import_bundle(tmp_path / "bundle", cache)  # entries already there are kept
    assert again["images"] == [a, b] and (a / "rootfs/keep").read_bytes() == b"k"


def test_damaged_bundle_leaves_nothing_half_unpacked(tmp_path, capsys):
    bundle = _bundle(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["layers"]["sha256:b"]["sha256"] = "0" * 64  # b's layer fails when read
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    cache = tmp_path / "cache"
    with pytest.raises(BundleError, match="sha256"):
        import_bundle(bundle, cache)
    assert (cache / "sha256_aaaa/env.json").is_file() and not (cache / "sha256_bbbb").exists()
    assert not [p for p in os.listdir(cache) if p.startswith(".import")]
    part = bundle / "pack.000"
    part.write_bytes(part.read_bytes()[:-5])
    assert main(["import", str(bundle), "--cache", str(tmp_path / "c2")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "pack.000" in err and "truncated" in err
    assert not (tmp_path / "c2").exists()


def test_not_a_bundle(tmp_path):
    with pytest.raises(BundleError, match="manifest.json: missing"):
        import_bundle(tmp_path, tmp_path / "cache")
