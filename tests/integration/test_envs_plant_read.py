"""The grader's read of a test file before planting, in a real container: a read that comes
back empty with exit 0 (a flaky exec) is tried again, and one that stays short is an
infrastructure error, never an empty text to plant over the real file."""

from __future__ import annotations

import pytest
from swefleet.envs.protocol import InfraError
from swefleet.envs.tamperrun import read_bytes

pytestmark = pytest.mark.integration
# `head` that prints nothing (exit 0) while /tmp/fail-reads holds a positive count
FLAKY_HEAD = """#!/bin/sh
n=$(cat /tmp/fail-reads 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then echo $((n - 1)) > /tmp/fail-reads; exit 0; fi
exec /usr/bin/head.real "$@"
"""


def _box(setup: str):
    """A base-image container (no network) after `setup` (a bash script) ran in it."""
    from swefleet.envs.containers import docker_client
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    box = docker_client().containers.run(DEFAULT_BASE_IMAGE, ["sleep", "300"], detach=True,
                                         network_mode="none", remove=True)
    res = box.exec_run(["/bin/bash", "-c", setup])
    if res.exit_code != 0:
        box.kill()
        raise AssertionError(res.output)
    return box


@pytest.fixture(scope="module")
def container():
    setup = ("mv /usr/bin/head /usr/bin/head.real && cat > /usr/bin/head && "
             "chmod +x /usr/bin/head && mkdir -p /w && printf 'def test_x():\\n    pass\\n' "
             "> /w/test_a.py && : > /w/empty.py")
    box = _box(f"cat > /tmp/h <<'EOF'\n{FLAKY_HEAD}EOF\n"
               + setup.replace("cat > /usr/bin/head", "cp /tmp/h /usr/bin/head"))
    yield box
    box.kill()


def _fail_next(box, n: int) -> None:
    assert box.exec_run(["bash", "-c", f"echo {n} > /tmp/fail-reads"]).exit_code == 0


def test_an_empty_read_is_tried_again(container):
    _fail_next(container, 2)
    assert read_bytes(container, "/w", "test_a.py") == b"def test_x():\n    pass\n"


def test_a_read_that_stays_short_is_an_infra_error(container):
    _fail_next(container, 3)
    with pytest.raises(InfraError, match="came back short 3 times"):
        read_bytes(container, "/w", "test_a.py")


def test_empty_and_missing_files_read_as_they_are(container):
    _fail_next(container, 0)
    assert read_bytes(container, "/w", "empty.py") == b""
    assert read_bytes(container, "/w", "missing.py") is None


def test_many_files_come_back_in_one_read_each_as_it_is(container):
    """One exec reads them all; a head that printed nothing for one file breaks the framing,
    and the whole read is tried again."""
    from swefleet.envs.tamperrun import read_files

    _fail_next(container, 1)
    got = read_files(container, "/w", ["test_a.py", "missing.py", "empty.py", "test_a.py"])
    assert got == {"test_a.py": b"def test_x():\n    pass\n", "missing.py": None, "empty.py": b""}


# `bash` that prints nothing (exit 0) while /tmp/fail-reads holds a positive count: an exec
# that came back empty
FLAKY_BASH = """#!/bin/bash.real
n=$(cat /tmp/fail-reads 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then echo $((n - 1)) > /tmp/fail-reads; exit 0; fi
exec /bin/bash.real "$@"
"""


@pytest.fixture()
def repository():
    """A container with a committed repository at /r (a module with a docstring, a README, a
    file outside the text patterns) and a `bash` that can be made to print nothing."""
    setup = ("mkdir -p /r/pkg && cd /r && git init -q && "
             "printf 'def f():\\n    \"\"\"f() gives 42.\"\"\"\\n' > pkg/__init__.py && "
             "echo 'Colours: navy' > README.md && echo 'secret 7' > data.bin && "
             "git add -A && git -c user.name=t -c user.email=t@t commit -qm base && "
             "git clone -q /r /r2 && "
             f"cat > /tmp/b <<'EOF'\n{FLAKY_BASH}EOF\n"
             "cp /bin/bash /bin/bash.real && install -m 755 /tmp/b /bin/bash.new && "
             "mv /bin/bash.new /bin/bash")
    box = _box(setup)
    yield box
    box.kill()


def test_the_repository_text_is_read_as_committed_and_kept_per_image(repository):
    """The guard's text (`envs/repotext.py`): the tracked text files, read once per image (its
    id, whatever name it is given) and working directory; an exec that comes back empty is
    tried again, and one that stays empty is an infrastructure error, never an empty text that
    would keep every twin."""
    from swefleet.envs import repotext

    _fail_next(repository, 0)
    text = repotext.repository_text(repository, "test-repotext-a", "/r")
    assert 'f() gives 42.' in text and "Colours: navy" in text and "secret" not in text
    assert repository.exec_run(["bash.real", "-c", "echo changed > /r/README.md"]).exit_code == 0
    assert repotext.repository_text(repository, "test-repotext-b", "/r") == text  # read once
    _fail_next(repository, 2)
    assert repotext.repository_text(repository, "test-repotext-a", "/r2") == text  # a clone
    _fail_next(repository, 3)
    with pytest.raises(InfraError, match="came back short 3 times"):
        repotext.repository_text(repository, "test-repotext-a", "/r3")
