#!/usr/bin/env bash
# Fetch vLLM 0.26.0's wheel from PyPI (no dependencies, nothing installed) and unpack its Python
# sources to .cache/vllm-src/0.26.0 (git-ignored), where tests/unit/test_inference_vllm_args.py
# looks for them. Override the target with SWEFLEET_VLLM_SRC=/some/dir.
set -euo pipefail
VERSION="${VLLM_VERSION:-0.26.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${SWEFLEET_VLLM_SRC:-$ROOT/.cache/vllm-src/$VERSION}"
PIP="${PIP:-$ROOT/.venv/bin/pip}"
[ -x "$PIP" ] || PIP="python3 -m pip"
if [ -f "$DEST/vllm/engine/arg_utils.py" ]; then
  echo "vLLM $VERSION source already at $DEST"; exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
$PIP download "vllm==$VERSION" --no-deps --only-binary=:all: -d "$TMP" >&2
WHEEL="$(ls "$TMP"/vllm-"$VERSION"-*.whl | head -n1)"
mkdir -p "$DEST"
python3 - "$WHEEL" "$DEST" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")]
    names += [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
    z.extractall(dest, names)
print(f"unpacked {len(names)} files to {dest}")
PY
echo "vLLM $VERSION source at $DEST"
