"""Package layout (the metadata is in pyproject.toml).

The rooms stay top-level folders of the repository and install under the swefleet namespace
(`agents/` becomes `swefleet.agents`, ...), so installing swefleet claims no import name but its
own: `agents`, `evals`, `inference`, ... belong to other well-known packages.
"""

from setuptools import find_namespace_packages, setup

ROOMS = ("agents", "envs", "evals", "inference", "orchestrator", "trainer")

# namespace discovery: data folders (prompts, task sets, recipes) ship as package data too
packages = find_namespace_packages(include=["swefleet", "swefleet.*"], exclude=["*__pycache__*"])
package_dir = {}
for room in ROOMS:
    package_dir[f"swefleet.{room}"] = room
    packages += [f"swefleet.{room}"] + [f"swefleet.{room}.{sub}" for sub in find_namespace_packages(room, exclude=["*__pycache__*"])]

setup(packages=packages, package_dir=package_dir)
