"""The wire protocol of the persistent shell session: bash text in, framed bytes out. Pure, no I/O.

One long-lived `bash` per sandbox reads commands from its stdin (a Docker exec socket). Each
command is sent as one `$'...'` line (ASCII only), then run by `eval` in a forked subshell: a job
of its own (`set -m`), so it has its own process group: a timeout kills that whole group inside
the container (`kill -9 -- -PGID`, by a second idle shell, the killer, that finds the group in
a file) and the shell itself survives. A subshell cannot change its
parent, so on exit it writes its state (cwd, shell variables incl. exported ones, functions,
`unset` calls) to a file that the parent evaluates when it changed; shell options (`set -e`,
`shopt`) do not persist. Every line of the file only adds state (unsets come last), so a half-written file
(a command killed while saving) restores a subset and breaks nothing; read-only variables fail
their own line only.

Output goes to the socket's stdout stream, ending with `\\x1e<nonce>:E<n>:<rc>:<pids_full>\\n`
written by the job's EXIT trap before it saves the state (so the caller need not wait for the
save), or by the parent after `wait` when the job was killed; either way after every byte of the
command's own output.
"""

from __future__ import annotations

import re
import struct

BOOTSTRAP = r"""set -m +o history
umask 022
__sf_dir=/tmp
[[ -w /dev/shm ]] && __sf_dir=/dev/shm  # tmpfs: writes 3x cheaper than on overlayfs
__sf_st=$__sf_dir/.swefleet-$__sf_id-state __sf_done=$__sf_dir/.swefleet-$__sf_id-done
__sf_pg=$__sf_dir/.swefleet-$__sf_id-pgid
builtin trap 'command rm -f "$__sf_st" "$__sf_done" "$__sf_pg"' EXIT
__sf_pre() {  # in the job's subshell: report the end and save the state from its EXIT trap
  __sf_jn=$1 __sf_un=; exec {__sf_out}>&1; builtin trap __sf_exit EXIT
  builtin echo 500 >/proc/self/oom_score_adj
} 2>/dev/null
__sf_exit() {  # the end marker first (the caller waits for it), then the state dump
  __sf_rc=$?; builtin printf '%d' "$__sf_jn" >"$__sf_done"; __sf_end "$__sf_jn" >&"$__sf_out"
  __sf_save
} 2>/dev/null
__sf_save() {  # (volatile specials are dropped so that an unchanged state dumps identically)
  builtin unset -v __sf_c __sf_old __sf_new __sf_rc __sf_last __sf_jn __sf_out _ BASH_COMMAND \
    EPOCHREALTIME EPOCHSECONDS LINENO PIPESTATUS RANDOM SRANDOM SECONDS GROUPS BASHPID \
    BASH_SUBSHELL BASH_ARGV0 COMP_WORDBREAKS
  builtin unset -f __sf_changed __sf_pre __sf_exit __sf_wait __sf_fin __sf_end __sf_sync unset \
    __sf_save
  { builtin printf 'builtin cd -- %q\n' "$PWD"
    builtin declare -p
    builtin declare -f
    builtin printf '%s' "$__sf_un"
  } >"$__sf_st"
} 2>/dev/null
__sf_changed() {  # mapfile reads a regular file buffered (read -d '' would read byte by byte)
  builtin mapfile -d '' __sf_new <"$__sf_st" && [[ ${__sf_new[0]} != "$__sf_old" ]] &&
    __sf_old=${__sf_new[0]}
} 2>/dev/null
unset() { builtin unset "$@" && __sf_un+="builtin unset ${@@Q}"$'\n'; }
__sf_wait() {  # the job's process group goes to a file, where the killer looks it up
  if [[ $! == "${__sf_last-}" ]]; then  # the fork failed (pids limit): no new job
    __sf_rc=126; builtin printf 'swefleet: could not start the command (fork failed)\n'
    builtin printf '%d 0\n' "$1" >"$__sf_pg"; return
  fi
  __sf_last=$!; builtin printf '%d %d\n' "$1" "$!" >"$__sf_pg"
  builtin wait "$!"; __sf_rc=$?
} 2>/dev/null
__sf_fin() {  # the end marker, unless the job's EXIT trap already wrote it (killed, trap replaced)
  local d; builtin read -r d <"$__sf_done"; [[ $d == "$1" ]] || __sf_end "$1"
} 2>/dev/null
__sf_end() {  # flag 1: the pids limit is (nearly) reached, e.g. by a fork bomb left running
  local f=0 c
  [[ -n $__sf_pids ]] && builtin read -r c <"$__sf_pids" &&
    (( c >= __sf_pmax - 2 - __sf_pmax / 50 )) && f=1
  builtin printf '\036%s:E%d:%d:%d\n' "$__sf_id" "$1" "$__sf_rc" "$f"
} 2>/dev/null
__sf_sync() { builtin printf '\036%s:S%d:0:0\n' "$__sf_id" "$1"; }  # flushes what came before
__sf_pids=
for __sf_f in /sys/fs/cgroup/pids/pids /sys/fs/cgroup/pids; do
  [[ -r $__sf_f.max ]] && builtin read -r __sf_pmax <"$__sf_f.max" && __sf_pids=$__sf_f.current && break
done 2>/dev/null
[[ $__sf_pmax == +([0-9]) ]] || __sf_pids=
"""

#: The killer: a second, idle shell in the container that kills without forking, so it works
#: even when a fork bomb has used up the pids limit. `J<n>`: kill job n's process group and wait
#: until it is gone (answers `k`; `w` if the job has not started yet; `n` if its fork failed);
#: anything else: `kill -9 --` that (answers `k`).
KILLER = r"""d=/tmp; [[ -w /dev/shm ]] && d=/dev/shm; F=$d/.swefleet-NONCE-pgid
while IFS= read -r l; do
  case $l in
    J*) j= p=; builtin read -r j p <"$F" 2>/dev/null
        if [[ $j != "${l#J}" ]]; then builtin printf 'w\n'
        elif (( p > 1 )); then builtin kill -9 -- "-$p" 2>/dev/null
          for ((i = 0; i < 50000; i++)); do builtin kill -0 -- "-$p" 2>/dev/null || break; done
          builtin printf 'k\n'
        else builtin printf 'n\n'; fi ;;
    *) builtin kill -9 -- $l 2>/dev/null; builtin printf 'k\n' ;;
  esac
done"""


def killer_script(nonce: str) -> str:
    return KILLER.replace("NONCE", nonce)


SHELL_ARGV = ["bash", "--noprofile", "--norc"]


def bootstrap_text(nonce: str) -> bytes:
    """Defines the helper functions and answers `<nonce>:READY:<pid>:<uid>:<gid>:<HEAD>`."""
    return (
        f"__sf_id={nonce}\n{BOOTSTRAP}"
        "__sf_base=$(git rev-parse --verify -q HEAD 2>/dev/null)\n"
        'builtin printf \'%s:READY:%d:%d:%d:%s\\n\' "$__sf_id" $$ $UID "${GROUPS[0]}" '
        '"$__sf_base"\n'
    ).encode()


def ready_re(nonce: str) -> re.Pattern[bytes]:
    """Groups: shell pid, uid, gid, HEAD commit of the working directory (may be empty)."""
    return re.compile(re.escape(nonce).encode() + rb":READY:(\d+):(\d+):(\d+):([0-9a-f]*)\n")


def _ansi_c_table() -> list[str]:
    table = [f"\\x{b:02x}" for b in range(256)]
    for b in range(0x20, 0x7F):
        table[b] = chr(b)
    table[ord("\\")], table[ord("'")] = "\\\\", "\\'"
    table[ord("\n")], table[ord("\t")] = "\\n", "\\t"
    return table


_ANSI_C = _ansi_c_table()


def ansi_c_quote(text: str) -> str:
    """`$'...'` literal for bash: pure ASCII, one line, any bytes (no here-document pipe)."""
    return "$'" + "".join([_ANSI_C[b] for b in text.encode("utf-8", "surrogateescape")]) + "'"


def command_text(nonce: str, n: int, command: str, persist: bool = True) -> bytes:
    """Input that runs `command` as job `n` in its own process group and reports its end."""
    body = command.replace("\0", "")
    body += "" if body.endswith("\n") else "\n"  # a trailing here-document needs its newline
    pre, end = (f"__sf_pre {n}; ", f"__sf_fin {n}") if persist else ("", f"__sf_end {n}")
    return (
        f"__sf_c={ansi_c_quote(body)}\n"
        f'({pre}eval "$__sf_c") </dev/null 2>&1 & __sf_wait {n}; {end}; '
        f'__sf_changed && eval "$__sf_old" 2>/dev/null\n'
    ).encode()


def end_tag(nonce: str, n: int) -> bytes:
    return f"\x1e{nonce}:E{n}:".encode()


def sync_text(n: int) -> bytes:
    """Input that makes the shell write `sync_tag(n)`: every byte before it has arrived."""
    return f"__sf_sync {n}\n".encode()


def sync_tag(nonce: str, n: int) -> bytes:
    return f"\x1e{nonce}:S{n}:".encode()


class Demux:
    """Splits Docker's multiplexed exec stream (8-byte header: stream, 0, 0, 0, size BE)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        frames: list[tuple[int, bytes]] = []
        pos, buf = 0, self._buf
        while len(buf) - pos >= 8:
            stream, size = buf[pos], struct.unpack_from(">I", buf, pos + 4)[0]
            if len(buf) - pos - 8 < size:
                break
            frames.append((stream, bytes(buf[pos + 8 : pos + 8 + size])))
            pos += 8 + size
        del buf[:pos]
        return frames


class OutputCapture:
    """Keeps the head and tail of a byte stream until an end tag `<tag><rc>\\n` shows up."""

    def __init__(self, tag: bytes, max_bytes: int) -> None:
        self.tag = tag
        self.head_max = max_bytes // 2
        self.tail_max = max_bytes - self.head_max
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.rc: int | None = None
        self.pids_full = False
        """The shell reported the container's pids limit (nearly) reached after the command."""
        self.done = False
        self.rest = b""
        """Bytes after the end line (output of background jobs; belongs to what comes next)."""
        self._carry = bytearray()

    def feed(self, data: bytes) -> bool:
        """Consume `data`; True once the end tag and its line were seen."""
        scan = self._carry + data
        idx = scan.find(self.tag)
        if idx < 0:
            keep = min(len(scan), len(self.tag) - 1)
            self._commit(scan[: len(scan) - keep])
            self._carry = scan[len(scan) - keep :]
            return False
        nl = scan.find(b"\n", idx + len(self.tag))
        self._commit(scan[:idx])
        if nl < 0:
            self._carry = scan[idx:]
            return False
        rc, _, flag = bytes(scan[idx + len(self.tag) : nl]).partition(b":")
        self.rc, self.pids_full = int(rc), flag == b"1"
        self.rest = bytes(scan[nl + 1 :])
        self._carry = bytearray()
        self.done = True
        return True

    def _commit(self, chunk: bytes | bytearray) -> None:
        if not chunk:
            return
        self.total += len(chunk)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_max + 65536:
                del self.tail[: len(self.tail) - self.tail_max]

    def result(self) -> tuple[str, int]:
        """(text, bytes cut from the middle), decoded with replacement characters."""
        tail = bytes(self.tail[-self.tail_max :]) if self.tail_max else b""
        cut = self.total - len(self.head) - len(tail)
        head_text = self.head.decode("utf-8", errors="replace")
        tail_text = tail.decode("utf-8", errors="replace")
        if cut <= 0:
            return (bytes(self.head) + tail).decode("utf-8", errors="replace"), 0
        return f"{head_text}\n[... {cut} bytes cut ...]\n{tail_text}", cut
