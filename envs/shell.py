"""The wire protocol of the persistent shell session: bash text in, framed bytes out. Pure, no I/O.

One long-lived `bash` per sandbox reads requests from its stdin (a Docker exec socket) in a loop
defined by the bootstrap: a fixed-width header (`read -N`, one read syscall, where bash's parser
would read a command line byte by byte) and the command as one ASCII `$'...'` literal. The
command runs by `eval` in a forked subshell, a job of its own (`set -m`), so it has its own
process group: a timeout kills that whole group inside the container (`kill -9 -- -PGID`, by a
second idle shell, the killer, that finds the group in a file) and the shell itself survives.
When the job's subshell ends, whatever it left running in its process group (a background job,
a fork bomb) is killed by the shell before it reads the next request, so that a command ends
when its processes do and the next command's output is its own (what they wrote after the
job's end line, up to the shell's `F` line, is dropped). A subshell cannot change its parent,
so on exit it writes its state (cwd, shell variables incl. exported ones, functions, `unset`
calls) to a file that the parent evaluates when it changed;
shell options (`set -e`, `shopt`) do not persist. Every line of the file only adds state (unsets
come last), so a half-written file (a command killed while saving) restores a subset and breaks
nothing; read-only variables fail their own line only.

Output goes to the socket's stdout stream, ending with `\\x1e<nonce>:E<n>:<rc>:<pids>\\n`
written by the job's EXIT trap before it saves the state (so the caller need not wait for the
save), or by the parent after `wait` when the trap did not save (killed, trap replaced): the
state file starts with the number of the job that wrote it. Either way after every byte of the
command's own output; a killed job may leave a second end line, which the caller's sync drops.

The per-command path forks once (the job) and runs builtins only, without function-level
redirections (each costs about ten system calls in bash). A command that `state_neutral` finds
unable to change the state skips the dump and the parent's compare (unless the shell has user
functions, which any word may call): its job ends with status 0 once its trap wrote the end line.
"""

from __future__ import annotations

import re
import struct

BOOTSTRAP = r"""set -m +o history
umask 022
__sf_dir=/tmp
[[ -w /dev/shm ]] && __sf_dir=/dev/shm  # tmpfs: writes 3x cheaper than on overlayfs
__sf_st=$__sf_dir/.swefleet-$__sf_id-state __sf_pg=$__sf_dir/.swefleet-$__sf_id-pgid
builtin trap 'command rm -f "$__sf_st" "$__sf_pg"' EXIT
builtin printf '0\0' >"$__sf_st"
__sf_old= __sf_oom= __sf_fn=
{ builtin read -r __sf_f </proc/self/oom_score_adj &&
  builtin echo "$__sf_f" >/proc/self/oom_score_adj && __sf_oom=1; } 2>/dev/null  # writable?
__sf_pre() {  # in the job's subshell: report the end and save the state from its EXIT trap
  __sf_jn=$1 __sf_fast=$2 __sf_un= __sf_ok=; exec {__sf_out}>&1; builtin trap __sf_exit EXIT
  [[ -n $__sf_oom ]] && builtin echo 500 >/proc/self/oom_score_adj
}
__sf_exit() {  # the end marker first (the caller waits for it), then the state dump
  __sf_rc=$?; builtin set +eu; __sf_end "$__sf_jn" >&"$__sf_out" && __sf_ok=$__sf_jn
  if [[ -n $__sf_fast ]]; then [[ -n $__sf_ok ]] && builtin exit 0; builtin exit 1; fi
  __sf_save  # (fast: status 0 tells the parent that the end line was written)
} 2>/dev/null  # (also hides `set -x` traces of the helpers)
__sf_save() {  # (volatile and call-stack specials are dropped: an unchanged state dumps the same)
  builtin unset -v __sf_c __sf_q __sf_h __sf_n __sf_new __sf_old __sf_rc __sf_last __sf_jn \
    __sf_out __sf_f __sf_fn __sf_fast __sf_ev0 _ BASH_COMMAND EPOCHREALTIME EPOCHSECONDS LINENO \
    PIPESTATUS RANDOM SRANDOM SECONDS GROUPS BASHPID BASH_SUBSHELL BASH_ARGV0 COMP_WORDBREAKS \
    FUNCNAME HISTCMD
  builtin unset -f __sf_pre __sf_exit __sf_wait __sf_fin __sf_end __sf_sync __sf_reap unset \
    __sf_save __sf_events
  { builtin printf '%s\0builtin cd -- %q\n' "$__sf_ok" "$PWD"  # job number: the trap ran
    builtin unset -v __sf_ok
    builtin declare -p
    builtin printf '\0'
    builtin declare -f
    builtin printf '%s' "$__sf_un"
  } >"$__sf_st"
}
unset() { builtin unset "$@" && __sf_un+="builtin unset ${@@Q}"$'\n'; }
__sf_wait() {  # the job's process group goes to a file, where the killer looks it up
  if [[ $! == "${__sf_last-}" ]]; then  # the fork failed (pids limit): no new job
    __sf_rc=126; builtin printf 'swefleet: could not start the command (fork failed)\n'
    builtin printf '%d 0\n' "$1" >"$__sf_pg"; return
  fi
  __sf_last=$!; builtin printf '%d %d\n' "$1" "$!" >"$__sf_pg"
  builtin wait "$!"; __sf_rc=$?
}
__sf_fin() {  # the end marker unless the job's trap wrote it; true if the state changed
  builtin mapfile -d '' __sf_new <"$__sf_st"  # [0] job number, [1] variables, [2] functions
  [[ ${__sf_new[0]-} == "$1" ]] || __sf_end "$1"
  [[ ${__sf_new[1]-}${__sf_new[2]-} != "$__sf_old" ]] || builtin return
  __sf_old=${__sf_new[1]-}${__sf_new[2]-} __sf_fn=${__sf_new[2]:+1}
}
__sf_end() {  # flag 1: the pids limit is (nearly) reached, e.g. by a fork bomb left running,
  # or a fork failed at the limit during the job and what is left still fills half of it;
  builtin local f=2 c e  # 2: no pids cgroup to read (the caller judges by the output)
  [[ -n $__sf_pids ]] && f=0 && builtin read -r c <"$__sf_pids" &&
    { (( c >= __sf_pmax - 2 - __sf_pmax / 50 )) ||
      { (( 2 * c >= __sf_pmax )) && __sf_events e && (( e > ${__sf_ev0:-0} )); }; } && f=1
  builtin printf '\036%s:E%d:%d:%d\n' "$__sf_id" "$1" "$__sf_rc" "$f"
}
__sf_events() {  # into variable $1: how many forks the pids limit refused so far (0: unknown)
  builtin local k n; builtin printf -v "$1" 0
  [[ -n $__sf_pev ]] && builtin read -r k n <"$__sf_pev" && [[ $k == max && $n == +([0-9]) ]] &&
    builtin printf -v "$1" %s "$n"
}
__sf_sync() { builtin printf '\036%s:S%d:0:0\n' "$__sf_id" "$1"; }  # flushes what came before
__sf_reap() {  # after job $1: kill what it left running (its process group), then say so
  builtin local i
  if [[ -n ${__sf_last-} ]] && builtin kill -9 -- "-$__sf_last" 2>/dev/null; then
    for ((i = 0; i < 50000; i++)); do builtin kill -0 -- "-$__sf_last" 2>/dev/null || break; done
  fi
  builtin printf '\036%s:F%d:0:0\n' "$__sf_id" "$1"  # what comes before is not the next job's
}
__sf_pids= __sf_pev=
for __sf_f in /sys/fs/cgroup/pids/pids /sys/fs/cgroup/pids; do
  [[ -r $__sf_f.max ]] && builtin read -r __sf_pmax <"$__sf_f.max" && __sf_pids=$__sf_f.current &&
    { [[ -r $__sf_f.events ]] && __sf_pev=$__sf_f.events; builtin break; }
done 2>/dev/null
[[ $__sf_pmax == +([0-9]) ]] || __sf_pids=
"""

#: The request loop, started last: `<kind><n:10><len:10>` then `len` bytes of `$'...'`. Kinds:
#: P (a command whose state persists), Q (the same for a command that `state_neutral` found
#: unable to change the state: unless the shell has functions, which any word may call, it skips
#: the state dump and its job ends with status 0 once its trap wrote the end line), N (a command
#: whose state does not persist), S (sync). `read -N` on a pipe reads a whole header or body with
#: one system call; TMOUT (the user's variable) would otherwise time the reads out.
LOOP = r"""while TMOUT= builtin read -r -N 21 __sf_h; do
  __sf_n=$((10#${__sf_h:1:10}))
  case ${__sf_h::1} in
    [PQN]) TMOUT= builtin read -r -N $((10#${__sf_h:11:10})) __sf_q
       builtin eval "__sf_c=$__sf_q"; __sf_events __sf_ev0 ;;&
    Q) if [[ -z $__sf_fn ]]; then
         (__sf_pre "$__sf_n" 1; builtin eval "$__sf_c") </dev/null 2>&1 &
         __sf_wait "$__sf_n"; (( __sf_rc == 0 )) || __sf_end "$__sf_n"
         __sf_reap "$__sf_n"; builtin continue
       fi ;;&
    [PQ]) (__sf_pre "$__sf_n" ''; builtin eval "$__sf_c") </dev/null 2>&1 &
       __sf_wait "$__sf_n"; __sf_fin "$__sf_n" && builtin eval "$__sf_old" 2>/dev/null
       __sf_reap "$__sf_n" ;;
    N) (builtin eval "$__sf_c") </dev/null 2>&1 & __sf_wait "$__sf_n"; __sf_end "$__sf_n"
       __sf_reap "$__sf_n" ;;
    S) __sf_sync "$__sf_n" ;;
  esac
done; builtin exit 0
"""

#: The killer: a second, idle shell in the container that kills without forking, so it works
#: even when a fork bomb has used up the pids limit. `J<n>`: kill job n's process group and wait
#: until it is gone (answers `k`; `w` if the job has not started yet; `n` if its fork failed);
#: `P<n>`: has job n started (`s`) or not yet (`w`: its fork has not returned)?
#: `-1`: `kill -9 -1` until no process of the user but the killer is left (answers `k`);
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
    P*) j= p=; builtin read -r j p <"$F" 2>/dev/null
        if [[ $j == "${l#P}" ]]; then builtin printf 's\n'; else builtin printf 'w\n'; fi ;;
    -1) for ((i = 0; i < 500; i++)); do builtin kill -9 -1 2>/dev/null || break; done
        builtin printf 'k\n' ;;  # again until none is left: a bomb forks into freed slots
    *) builtin kill -9 -- $l 2>/dev/null; builtin printf 'k\n' ;;
  esac
done"""


def killer_script(nonce: str) -> str:
    return KILLER.replace("NONCE", nonce)


SHELL_ARGV = ["bash", "--noprofile", "--norc"]


def bootstrap_text(nonce: str) -> bytes:
    """Defines the helpers, answers `<nonce>:READY:<pid>:<uid>:<gid>:<HEAD>`, starts the loop."""
    return (
        f"__sf_id={nonce}\n{BOOTSTRAP}"
        "__sf_base=$(git rev-parse --verify -q HEAD 2>/dev/null)\n"
        'builtin printf \'%s:READY:%d:%d:%d:%s\\n\' "$__sf_id" $$ $UID "${GROUPS[0]}" '
        f'"$__sf_base"\nbuiltin unset -v __sf_base __sf_f\n{LOOP}'
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
    return "$'" + "".join([_ANSI_C[b] for b in to_bytes(text)]) + "'"


def to_bytes(text: str) -> bytes:
    """UTF-8 of any str: escaped bytes (U+DC80..U+DCFF, `surrogateescape`) become those bytes
    again, other lone surrogates (a `\\ud800` JSON escape in a tool call) their 3-byte form."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return b"".join(
            c.encode("utf-8", "surrogateescape" if "\udc80" <= c <= "\udcff" else "surrogatepass")
            for c in text
        )


#: Words that can change the shell's state (cwd, variables, functions) or its EXIT trap, or run
#: text as code. Quotes and backslashes are dropped before words are compared.
_STATE_WORDS_TEXT = (
    "cd pushd popd dirs export unset declare typeset local readonly source . eval read mapfile "
    "readarray getopts printf let set shopt trap exec builtin command enable function select "
    "for coproc wait alias unalias hash shift caller fc history bind complete compgen"
)
_STATE_WORDS = frozenset(_STATE_WORDS_TEXT.split())
#: `=` (assignments, `${x:=}`, arithmetic), `$` (any expansion: `$cmd` may be `cd`), backquotes,
#: braces (`{c,}d`, `{fd}>`), `((`/`[[` (arithmetic, BASH_REMATCH), `()` (function definitions),
#: `++`/`--` inside brackets (side effects of array subscripts).
_STATE_SYNTAX = re.compile(r"[=$`{}]|\(\(|\[\[|\(\s*\)|\[[^\]]*(\+\+|--)")
_TOKENS = re.compile(r"(\|\||&&|;;|[;&|()\n])|(\d*[<>]+&?)|[^\s;&|()<>]+")
_KEYWORDS_TEXT = "if then else elif do while until time ! fi done esac"
_KEYWORDS = frozenset(_KEYWORDS_TEXT.split())


def state_neutral(command: str) -> bool:
    """True if `command` cannot change the shell's state, so its job need not dump it. Conservative
    (a false "no" only costs the dump): no expansion, assignment or brace, no word of
    `_STATE_WORDS` anywhere, no glob in a command word (`c? /tmp` may be `cd /tmp`)."""
    if _STATE_SYNTAX.search(command):
        return False
    command_word, target = True, False
    for m in _TOKENS.finditer(command):
        if m.group(1) is not None:  # a control operator: a command word follows
            command_word = True
        elif m.group(2) is not None:  # a redirection: its target is not the command word
            target = True
        else:
            word = m.group(0).replace("'", "").replace('"', "").replace("\\", "")
            globbed = word != "[" and any(c in word for c in "*?[")
            if word in _STATE_WORDS or (command_word and not target and globbed):
                return False
            if not target:
                command_word = word in _KEYWORDS
            target = False
    return True


def command_text(nonce: str, n: int, command: str, persist: bool = True) -> bytes:
    """The request that runs `command` as job `n` in its own process group and reports its end."""
    body = command.replace("\0", "")
    body += "" if body.endswith("\n") else "\n"  # a trailing here-document needs its newline
    quoted = ansi_c_quote(body)
    kind = ("Q" if state_neutral(body) else "P") if persist else "N"
    return f"{kind}{n:010d}{len(quoted):010d}{quoted}".encode()


def end_tag(nonce: str, n: int) -> bytes:
    return f"\x1e{nonce}:E{n}:".encode()


def sync_text(n: int) -> bytes:
    """The request that makes the shell write `sync_tag(n)`: every byte before it has arrived."""
    return f"S{n:010d}{0:010d}".encode()


def sync_tag(nonce: str, n: int) -> bytes:
    return f"\x1e{nonce}:S{n}:".encode()


def reap_tag(nonce: str, n: int) -> bytes:
    """The line the shell writes once what job `n` left running is killed: the bytes between
    the job's end line and it are that leftovers' output, nobody's."""
    return f"\x1e{nonce}:F{n}:".encode()


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


class PlainStream:
    """`Demux`'s interface for an unframed stdout stream (a subprocess's socket)."""

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        return [(1, data)] if data else []


#: What follows an end tag on its line: `<rc>:<pids>` (0; 1: the pids limit is nearly reached,
#: or it refused a fork during the command and half of it is still taken; 2: the shell cannot
#: see its pids cgroup). Anything else after the tag is the
#: command's own output (the tag holds a nonce that a command can read and print).
_END_REST = re.compile(rb"(-?\d{1,10}):([012])\n")
#: The start of `_END_REST` (the rest of the line has not arrived yet).
_END_PARTIAL = re.compile(rb"-?\d{0,10}(:[012]?)?")


#: What a shell or runtime prints when it cannot fork (the pids limit is reached): bash's
#: `fork: retry: Resource temporarily unavailable`, dash's `Cannot fork`, the job's own note.
_FORK_FAILED = re.compile(
    rb"(?m)^[^\n]{0,200}?(: fork: (retry: )?Resource temporarily unavailable$|: Cannot fork$"
    rb"|^swefleet: could not start the command \(fork failed\)$)"
)


def fork_failed(capture: OutputCapture) -> bool:
    """True if the captured output shows that processes could not be forked (a fork bomb, or
    processes left behind that fill the pids limit), where the cgroup cannot tell the shell."""
    text = capture.head + capture.tail + capture._carry  # (carry: the last bytes, uncommitted)
    return bool(_FORK_FAILED.search(text))


class OutputCapture:
    """Keeps the head and tail of a byte stream until an end line `<tag><rc>:<flag>\\n` shows
    up; a tag followed by anything else is output."""

    def __init__(self, tag: bytes, max_bytes: int) -> None:
        self.tag = tag
        self.head_max = max_bytes // 2
        self.tail_max = max_bytes - self.head_max
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.rc: int | None = None
        self.pids_full = False
        self.pids_unknown = False
        """The shell cannot read its pids cgroup (so `pids_full` says nothing)."""
        """The shell reported the container's pids limit (nearly) reached after the command."""
        self.done = False
        self.rest = b""
        """Bytes after the end line (output of background jobs; belongs to what comes next)."""
        self._carry = bytearray()

    def feed(self, data: bytes) -> bool:
        """Consume `data`; True once the end tag and its line were seen."""
        scan = self._carry + data
        pos = 0
        while (idx := scan.find(self.tag, pos)) >= 0:
            at = idx + len(self.tag)
            if m := _END_REST.match(scan, at):
                self._commit(scan[:idx])
                self.rc, self.pids_full = int(m[1]), m[2] == b"1"
                self.pids_unknown = m[2] == b"2"
                self.rest = bytes(scan[m.end() :])
                self._carry = bytearray()
                self.done = True
                return True
            if _END_PARTIAL.fullmatch(scan, at):  # the end line may still be arriving
                self._commit(scan[:idx])
                self._carry = scan[idx:]
                return False
            pos = idx + 1  # not an end line: the command printed the tag
        keep = min(len(scan), len(self.tag) - 1)
        self._commit(scan[: len(scan) - keep])
        self._carry = scan[len(scan) - keep :]
        return False

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
