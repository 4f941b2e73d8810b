"""`swefleet eval` instance selection: --instance-ids, --filter (re.match), --slice."""

import pytest
from swefleet.evals.select import parse_slice, select_tasks

from swefleet.types import Task

pytestmark = pytest.mark.unit
TASKS = [Task(instance_id=f"{repo}__{repo}-{i}", repo=f"{repo}/{repo}", problem_statement="p")
         for repo in ("django", "sympy") for i in range(1, 6)]


def _ids(tasks):
    return [t.instance_id for t in tasks]


def test_slice_specs():
    assert parse_slice("0:10") == slice(0, 10)
    assert parse_slice(":3") == slice(None, 3) and parse_slice("2:") == slice(2, None)
    assert parse_slice("::2") == slice(None, None, 2)
    for bad in ("3", "a:b", "1:2:0", "1:2:3:4"):
        with pytest.raises(ValueError, match="--slice"):
            parse_slice(bad)


def test_filter_then_slice_in_task_order():
    assert _ids(select_tasks(TASKS, filter_regex="sympy")) == _ids(TASKS[5:])
    assert select_tasks(TASKS, filter_regex="__sympy") == []  # re.match: anchored at the start
    assert _ids(select_tasks(TASKS, filter_regex=r"django__django-[2-4]", slice_spec="1:")) == [
        "django__django-3", "django__django-4"]
    assert _ids(select_tasks(TASKS, slice_spec="-2:")) == ["sympy__sympy-4", "sympy__sympy-5"]


def test_instance_ids_keep_file_order_and_unknown_ids_are_named():
    picked = select_tasks(TASKS, instance_ids=["sympy__sympy-2", "django__django-5"])
    assert _ids(picked) == ["django__django-5", "sympy__sympy-2"]
    assert _ids(select_tasks(TASKS, ["sympy__sympy-2", "sympy__sympy-3"], "sympy", "1:")) == [
        "sympy__sympy-3"]
    with pytest.raises(ValueError, match="nope__nope-1"):
        select_tasks(TASKS, instance_ids=["nope__nope-1", "sympy__sympy-2"])
    with pytest.raises(ValueError, match="--filter"):
        select_tasks(TASKS, filter_regex="(")


def test_per_split_takes_packages_in_turn_and_each_split_on_its_own():
    tasks = [Task(instance_id=f"{repo}-{i}", repo=repo, problem_statement="p", split=split)
             for split, repos in (("heldout", ("a", "b", "c")), ("heldout_instance", ("d",)))
             for repo in repos for i in range(1, 4)]
    picked = _ids(select_tasks(tasks, per_split=4))
    assert picked == ["a-1", "a-2", "b-1", "c-1", "d-1", "d-2", "d-3"]  # task-file order
    assert picked == _ids(select_tasks(list(tasks), per_split=4))  # the same sample every time
    assert len(select_tasks(tasks, per_split=100)) == len(tasks)
    assert _ids(select_tasks(tasks, filter_regex="[ab]-", per_split=3)) == ["a-1", "a-2", "b-1"]
