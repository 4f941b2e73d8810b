"""The front door: the command line (`cli`), the config tree (`config`), topology, and each
command's run wiring (`rl`, `eval`, `bench`, `sft`, `demo`, `synth`, `report`, `plan`, `slurm`).
It builds the rooms' parts from the config; no room imports it."""
