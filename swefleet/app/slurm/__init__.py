"""`swefleet slurm`: one sbatch job that runs a `swefleet rl` run on a Slurm allocation.

`config` (the `[slurm]` section), `layout` (which node runs which role; pure), `script` (the
batch script), `submit` (the command: write, print or submit), `roles` (what each step of the
job runs: `python -m swefleet.app.slurm.roles ...`). Light modules: no torch at import.
"""
