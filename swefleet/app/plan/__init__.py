"""`swefleet plan`: a capacity and cost planner. A layout (model shape, GPU, nodes, roles,
workload, price) goes in; GPUs per role, memory per GPU, KV capacity, traffic, step time and
cost per rollout come out, each from a named formula in `formulas.py` (docs/planning.md)."""
