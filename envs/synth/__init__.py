"""Task synthesis: real PyPI packages, bugs injected by program mutation, validated in Docker.

A recipe (`envs/recipes/<package>.toml`, `recipe.py`) names a pinned sdist, the source files
that may be mutated and the tests that ship in the sdist. The pipeline (`generate.py`,
`docs/tasks.md`):

1. `fetch.py`: pip downloads the pinned sdist (and pure-Python wheels the tests need) on the
   host at image-build time, checked against the recipe's sha256;
2. `build.py`: a per-package repo image (base image + unpacked sdist at /testbed) and, per task,
   a task image (repo image + the bug + the deciding tests removed, committed as the only
   commit, so git history never holds the fix);
3. `probe.py`: the real grader runs the package's tests on the clean repo k times (flaky tests
   are never used); `trace.py`: one traced run says which source lines the tests execute;
4. `mutators.py`: candidate bugs from the `ast` on executed lines (flipped comparison,
   off-by-one, removed branch, swapped arguments/operands, wrong constant, boolean/arithmetic
   operator swap), each a small position-based text edit; `probe.py` keeps a candidate that
   breaks >= 1 stable passing test without breaking collection;
5. `candidates.py`: `hide.py` removes the broken tests from the base state (`test_patch`
   brings them back), `statement.py` (+ `failures.py`) writes the issue text from the failure
   reports, `build.py` builds the task image; `derive.py` runs gold and empty patches k times
   to fix FAIL_TO_PASS / PASS_TO_PASS (tests that disagree between runs are dropped);
6. `validate.py`: gold resolves, empty does not, k runs agree (`swefleet tasks validate`).

The repository stores recipes and generated `tasks.jsonl` files, never third-party sources.
"""
