"""The shell session's wire protocol without Docker: framing, end markers, capping, quoting, and
the bash side run by a local bash (state persistence and unsets)."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest
from swefleet.envs import shell

pytestmark = pytest.mark.unit


def _frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + struct.pack(">I", len(payload)) + payload


def test_demux_reassembles_frames_split_anywhere():
    wire = _frame(1, b"hello ") + _frame(2, b"err\n") + _frame(1, b"world")
    for cut in range(len(wire) + 1):
        d = shell.Demux()
        frames = d.feed(wire[:cut]) + d.feed(wire[cut:])
        assert frames == [(1, b"hello "), (2, b"err\n"), (1, b"world")]


def test_capture_finds_the_end_tag_across_chunks_and_keeps_the_rest():
    tag = shell.end_tag("abc", 7)
    data = b"out\nno newline" + tag + b"3:0\nlate background output"
    for cut in range(len(data) + 1):
        cap = shell.OutputCapture(tag, 1000)
        early = cap.feed(data[:cut])
        later = data[cut:] if early else b""  # bytes after the end are not fed (pending)
        assert early or cap.feed(data[cut:])
        assert cap.rc == 3 and not cap.pids_full
        assert cap.result() == ("out\nno newline", 0)
        assert cap.rest + later == b"late background output"


def test_capture_keeps_head_and_tail_and_counts_the_cut():
    tag = shell.end_tag("n", 1)
    cap = shell.OutputCapture(tag, 10)
    for i in range(100):
        cap.feed(f"{i:03d}\n".encode())
    cap.feed(tag + b"0:1\n")
    text, cut = cap.result()
    assert cut == 400 - 10 and cap.pids_full
    assert text == "000\n0\n[... 390 bytes cut ...]\n\n099\n"


@pytest.mark.parametrize(
    "spoof", [b"abc\n", b"99999999999999999999999:1\n", b"0:7\n", b"x" * 100_000, b"1:0 \n"]
)
def test_a_printed_end_tag_without_a_valid_end_line_is_output(spoof):
    """A command can read the nonce (/dev/shm) and print the tag: garbage after it is output,
    never an error, and a long line after it is not held back."""
    tag = shell.end_tag("n", 2)
    data = b"a" + tag + spoof + b"b" + tag + b"5:0\nrest"
    for cut in (0, 1, len(tag) + 3, len(data) // 2, len(data)):
        cap = shell.OutputCapture(tag, 10**6)
        early = cap.feed(data[:cut])
        later = data[cut:] if early else b""
        assert early or cap.feed(data[cut:])
        assert cap.rc == 5 and cap.rest + later == b"rest"
        assert cap.result()[0] == (b"a" + tag + spoof + b"b").decode()
    cap = shell.OutputCapture(tag, 10**6)
    assert not cap.feed(b"a" + tag + spoof)
    assert cap.total >= len(spoof)  # counted as output (kill_bytes sees it)


def test_capture_replaces_invalid_utf8():
    tag = shell.end_tag("n", 1)
    cap = shell.OutputCapture(tag, 100)
    cap.feed(b"a\xff\xfeb\xe2\x82\xac" + tag + b"0:0\n")
    assert cap.result()[0] == "a\ufffd\ufffdb\u20ac"


@pytest.mark.parametrize("text", ["echo hi", "it's a \\ test", "a\nb\tc", "é€ \x01\x7f", "$x `y`"])
def test_ansi_c_quote_round_trips_through_bash(text):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    out = subprocess.run(
        ["bash", "-c", f"printf %s {shell.ansi_c_quote(text)}"], capture_output=True, check=True
    ).stdout
    assert out == text.encode()
    assert shell.ansi_c_quote(text).isascii()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("a\ud800b", b"a\xed\xa0\x80b"), ("\udcff\ud800\udc80", b"\xff\xed\xa0\x80\x80")],
)
def test_lone_surrogates_from_a_tool_call_are_sent_not_an_error(text, expected):
    """A `\\ud800` JSON escape in a model's tool call gives a str that is not UTF-8."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    request = shell.command_text("t", 1, f"printf %s '{text}'")
    assert request.isascii()
    out = subprocess.run(
        ["bash", "-c", f"printf %s {shell.ansi_c_quote(text)}"], capture_output=True, check=True
    ).stdout
    assert out == expected


def _session(*commands: str) -> list[tuple[str, int]]:
    """Run the protocol through a local bash; (output, rc) per command."""
    script = shell.bootstrap_text("t") + b"".join(
        shell.command_text("t", i, c) for i, c in enumerate(commands, 1)
    )
    out = subprocess.run(
        ["bash", "--noprofile", "--norc"],
        input=script,
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    results = []
    for i in range(1, len(commands) + 1):
        cap = shell.OutputCapture(shell.end_tag("t", i), 10_000)
        out = out[out.index(b"\n", out.index(b":READY:")) + 1 :] if i == 1 else out
        assert cap.feed(out)
        results.append((cap.result()[0], cap.rc))
        reaped = shell.OutputCapture(shell.reap_tag("t", i), 0)  # what it left running: killed
        assert reaped.feed(cap.rest)
        out = reaped.rest
    return results


def test_what_a_command_leaves_running_is_killed_before_the_next_one():
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    results = _session("(sleep 0.5; echo late) & echo now", "sleep 1; echo next",
                       "(trap '' HUP; while :; do echo spam; sleep 0.01; done) & sleep 0.1; echo ok",
                       "sleep 0.2; echo own")
    assert results[0] == ("now\n", 0) and results[1] == ("next\n", 0)
    assert results[2][0].endswith("ok\n") and results[3] == ("own\n", 0)


def test_state_persists_and_unsets_propagate_in_a_local_bash(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    results = _session(
        f"cd {tmp_path} && export A=1 && b=2 && f() {{ echo fn; }}",
        'echo "$PWD $A $b"; f; unset A; exit 5',
        'echo "${A-unset} $b"; set -e; false',
        "echo still; (exit 3)",
    )
    assert results == [
        ("", 0),
        (f"{tmp_path} 1 2\nfn\n", 5),
        ("unset 2\n", 1),
        ("still\n", 3),
    ]


#: One command a line (lines, not a list: the formatter would give each its own line).
STATEFUL = r"""cd /tmp
x=1
echo $HOME
echo `id`
export A
unset A
declare -i n
read line < f
f() { :; }
function f { :; }
for i in a; do :; done
((n++))
[[ a =~ b ]]
echo ${a[i++]}
{c,}d /tmp
"cd" /tmp
c\d /tmp
c? /tmp
ls; c* /
>x c? /tmp
source env.sh
. env.sh
eval ls
exec ls
trap '' EXIT
printf -v x 1
mapfile a < f
builtin cd /
set -a
shopt -s extglob
pushd /tmp
getopts ab o
echo {x}>f
[ -v 'a[i++]' ]
coproc cat
wait -p x
let n++"""
NEUTRAL = r"""true
ls -la
cat a.py | head -50
python -m pytest -q tests/x.py 2>&1 | tail
git diff
grep -rn foo src
sed -n 1,20p f
ls *.py
echo hi > out.txt
[ -f x ] && cat x
> c* cat
pytest -k "a and b"
exit 3
sleep 1 &"""


@pytest.mark.parametrize("command", STATEFUL.splitlines())
def test_commands_that_may_change_state_are_not_neutral(command):
    assert not shell.state_neutral(command)


@pytest.mark.parametrize("command", NEUTRAL.splitlines())
def test_plain_commands_are_neutral(command):
    assert shell.state_neutral(command)


def test_neutral_commands_keep_exit_codes_and_user_functions_keep_state(tmp_path):
    """Neutral commands skip the state dump, unless the shell has functions (`g` may `cd`)."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    assert shell.command_text("t", 1, "true").startswith(b"Q")
    results = _session(
        "false",
        "exit 7",
        "echo ok",
        f"g() {{ cd {tmp_path}; }}",
        "g",  # neutral by its text, but runs a function: the full path keeps the new cwd
        "pwd",
    )
    assert results == [("", 1), ("", 7), ("ok\n", 0), ("", 0), ("", 0), (f"{tmp_path}\n", 0)]
