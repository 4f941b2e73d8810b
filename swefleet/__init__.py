"""swefleet: train and evaluate coding agents on long multi-turn SWE episodes.

The rooms (`agents`, `envs`, `evals`, `inference`, `orchestrator`, `trainer`) are folders beside
this package in a source checkout and subpackages of it once installed (setup.py maps them), so
they are always imported as `swefleet.<room>`. In a checkout run without installing (PYTHONPATH
set to the repository), the checkout's root joins this package's search path for the same names.

Layers, nothing imports upwards: `swefleet.app` (the command line, the config tree, the run
wiring of each command) on top; the rooms; this package's own modules (types, run directory,
journal, batch schema, ...) at the bottom, shared by all.
"""

from pathlib import Path as _Path

ROOMS = ("agents", "envs", "evals", "inference", "orchestrator", "trainer")

_here = _Path(__file__).resolve().parent
if not (_here / ROOMS[0]).is_dir() and all(
    (_here.parent / room / "__init__.py").is_file() for room in ROOMS
):
    __path__.append(str(_here.parent))

try:
    from importlib.metadata import PackageNotFoundError as _NotFound
    from importlib.metadata import version as _version

    __version__ = _version("swefleet")
except _NotFound:  # a checkout used without installing
    __version__ = "0.1.0+checkout"
