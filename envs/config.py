"""Configs of the Docker sandbox layer: per-sandbox limits and the farm that hands sandboxes out.

A task may override any limit: `Task(..., sandbox={"memory_mb": 4096})` (tasks allow extra
fields); `SandboxLimits.for_task` merges the override into the farm's defaults.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Name of the optional Task field that overrides `SandboxLimits` for that task.
TASK_LIMITS_FIELD = "sandbox"

DEFAULT_SESSION_ENV = {
    "PAGER": "cat",
    "MANPAGER": "cat",
    "GIT_PAGER": "cat",
    "LESS": "-R",
    "TERM": "dumb",
    "PIP_PROGRESS_BAR": "off",
    "PIP_NO_INPUT": "1",
    "TQDM_DISABLE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "LANG": "C.UTF-8",
}


class SandboxLimits(BaseModel):
    """Resource and isolation limits of one sandbox container (enforced by Docker; the disk budget
    by the farm's watchdog)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float = Field(1.0, gt=0)
    """CPU quota in cores (`--cpus`)."""
    memory_mb: int = Field(2048, ge=16)
    """Memory limit in MiB; swap is set to the same value, so there is no extra swap."""
    pids_limit: int = Field(512, ge=16)
    """Maximum number of processes/threads in the container (`--pids-limit`); stops fork bombs."""
    lifetime_s: float = Field(4 * 3600, gt=0)
    """Maximum lifetime: PID 1 is `sleep <lifetime_s>`, so the container ends (and is removed) by
    itself even if the farm crashed. The reaper also removes containers past this age."""
    network: bool = False
    """Give the container a network (Docker's default bridge). Off by default: `--network none`."""
    user: str = "agent"
    """User that runs agent commands, file writes and patches (the image's uid 1000 `agent`).
    PID 1 runs as the image's user (root without capabilities), out of the agent's reach."""
    tmpfs_mb: int | None = Field(None, ge=1)
    """When set, `/tmp` is a tmpfs of this size (it counts against `memory_mb`)."""
    disk_mb: int | None = Field(None, ge=64)
    """When set, the writable layer is capped by the storage driver (`--storage-opt size=`);
    needs overlay2 on xfs with pquota, or devicemapper (most hosts cannot). `disk_budget_mb`
    below works everywhere."""
    disk_budget_mb: int | None = Field(4096, ge=16)
    """Disk budget of the container's writable layer (Docker's `SizeRw`: files written or
    changed outside tmpfs), on every storage driver. The farm's watchdog measures each sandbox
    in use every `FarmConfig.disk_check_interval_s`; one over budget is removed at once (freeing
    its disk), and its running and later operations raise `envs.protocol.DiskBudgetExceeded`:
    the episode ends with `limit_disk`, a policy failure (scored 0), never an infra error. The
    overshoot is bounded by the write rate times the interval. None turns the watchdog off for
    this sandbox."""
    nofile: int = Field(4096, ge=64)
    """Open-file limit (`ulimit -n`) inside the container."""
    max_file_mb: int = Field(1024, ge=1)
    """Largest file a process may write (`ulimit -f`, RLIMIT_FSIZE): a runaway writer gets
    `File too large` instead of filling the host disk. Works on every storage driver; many files
    under this cap are bounded by `disk_budget_mb`."""

    @classmethod
    def for_task(cls, defaults: SandboxLimits, task: Any) -> SandboxLimits:
        """`defaults` with the task's `sandbox` override (a dict of fields) merged in."""
        extra = getattr(task, "model_extra", None) or {}
        override = extra.get(TASK_LIMITS_FIELD)
        if not override:
            return defaults
        return cls.model_validate({**defaults.model_dump(), **dict(override)})


#: Files whose any change is dropped from a model patch before grading (see `envs/protect.py`).
DEFAULT_PROTECTED_PATHS = (
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "pytest.toml",
    ".pytest.toml",
    "sitecustomize.py",
    "usercustomize.py",
    "sitecustomize/",
    "usercustomize/",
    "apport_python_hook.py",
    "apport_python_hook/",
    "*.pth",
    "/pytest.py",
    "pytest/*",
    "_pytest/*",
    "/py.py",
    "pluggy/*",
    "*.pyc",
    "__pycache__/",
    "*.egg-info/*",
    "*.dist-info/*",
)
#: Config files whose pytest section a model patch may not change (their other edits stay).
DEFAULT_PROTECTED_PYTEST_CONFIG = ("setup.cfg", "tox.ini", "pyproject.toml")


class GradingConfig(BaseModel):
    """Grading (`[envs.grading]`): how it protects the test infrastructure from the patch it
    grades (the task's own test patch is trusted and never filtered), and the resources of
    each grading run (`swefleet rl`, `eval` and `tasks validate` alike)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED_PATHS
    """Globs of files a model patch may not add, change or delete: before grading, each file of
    the patch that names such a path (in any of its headers) is dropped, the rest still applies,
    and the paths are recorded in `GradeResult.dropped_paths`. A glob without `/` matches a
    file's name in any directory; one with `/` matches the whole path (`*` also matches `/`).
    A glob ending in `/` matches a directory of that name anywhere (all its files); one
    starting with `/` only at the repository's root. Letter case is ignored, and a symbolic
    link the patch adds matches when its target does or when a file inside it (read as a
    folder) would; a path below such a link matches as the path it reaches. The defaults are
    what pytest or Python load before the tests: `conftest.py` (hooks can rewrite every report
    to "passed"), pytest's own config files, the start-up hooks as modules and as packages
    (`sitecustomize`, `usercustomize`, `apport_python_hook` that Debian's and Ubuntu's
    `sitecustomize` imports, `*.pth`), a runner of the same name at the root (`python -m
    pytest` imports the working directory's `pytest` first), bytecode (`*.pyc`, `__pycache__`),
    and installed metadata (`entry_points.txt` can register a pytest plugin). A changed file
    the patch's headers did not name (a format only `patch` reads) fails the patch. Empty
    turns this off."""
    protected_pytest_config: tuple[str, ...] = DEFAULT_PROTECTED_PYTEST_CONFIG
    """Globs (same rules) of config files whose pytest part a model patch may not change:
    after the patch is applied, such a file whose `[tool:pytest]`/`[pytest]` sections (ini
    style) or `tool.pytest` table (TOML) differ from the base commit's — or that no longer
    parses — is reverted as a whole and recorded in `GradeResult.dropped_paths`; its other edits
    (dependencies, metadata) are kept when the pytest part is unchanged. Empty turns this off."""
    read_only_tests: bool = True
    """Run the tests with the repository read-only to them, so that nothing they write (the
    patched package's code included) can change a test file, or the bytecode pytest loads for
    one, before pytest reads it. Docker: the files are made readable and not writable and the
    test command runs as `nobody` (with `image_user = "image"`: as the image's user, who owns
    them and could make them writable again); bwrap: in a one-shot sandbox beside the grading
    sandbox, its workdir and home bound read-only. /tmp stays writable. Either way the
    repository's bytecode caches (`__pycache__`, `*.pyc`) are removed before the tests and
    they run with `PYTHONDONTWRITEBYTECODE=1`. Off: the tests run as the repository's owner
    and may write into it (a suite that writes into its own tree, e.g. image comparisons
    saved beside the tests, needs this)."""
    canaries: bool = True
    """Tamper checks (`envs/tamper.py`): for tasks with a pytest log parser, plant a random
    must-pass and must-fail test in each test file, collect pytest's JUnit report outside the
    repository, and grade a run whose canaries, deciding tests, exit status or JUnit report
    disagree with its log `tampered` (RL reward `agent.tampered_reward`). Deciding tests run
    under secret names beside must-fail twins (`envs/canary_twins.py`). Off: only the log is
    read (SWE-bench's way)."""

    timeout_s: float = Field(300.0, gt=0)
    """Deadline of one grading run (applying the patches and running the tests); a run past it
    is graded `tests timed out` and its container removed."""
    memory_mb: int = Field(2048, ge=64)
    """Memory limit of a grading container in MiB (Docker `--memory`; with the bwrap backend
    each process's address space)."""
    cpus: float = Field(1.0, gt=0)
    """CPU quota of a grading container in cores (Docker `--cpus`; more than the local
    engine's machine has is a config error when the grader starts). The bwrap backend cannot
    enforce it: another value than 1 there is a config error."""
    pids_limit: int = Field(512, ge=16)
    """Most processes/threads in a grading container (Docker `--pids-limit`; bwrap:
    RLIMIT_NPROC)."""
    parallelism: int = Field(8, ge=1)
    """Most grading runs at once per grader (the threads of its pool); more wait their turn."""
    gold_canary_rate: float = Field(0.02, ge=0.0, le=1.0)
    """Share of the episodes' grading runs during `swefleet rl` that also grade the task's gold
    patch (its `patch`; tasks without one are skipped) in a fresh sandbox, on a grader of its
    own with one slot, after the episode's grade: never in an episode's reward, never on the
    step's path. A gold patch that does not resolve means the environment is broken for that
    task (`env/gold_canary_failures`, the task id logged as a warning). The choice is a draw
    seeded by `orchestrator.seed`; 1.0 grades the gold after every episode's grade; 0 is off."""


class DockerHost(BaseModel):
    """One Docker engine of the farm (`FarmConfig.hosts`); see docs/hosts.md."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    """The engine: `unix:///var/run/docker.sock`, `tcp://host:2376` (TLS when the `tls_*` paths
    are set), or `ssh://user@host[:port][/remote/docker.sock]` (OpenSSH forwards a local socket
    to the remote engine's socket, `/var/run/docker.sock` unless the URL has a path; keys from
    `ssh_identity_file`, else the ssh agent or `~/.ssh/config`)."""
    max_sandboxes: int = Field(8, ge=1)
    """Most sandboxes (warm ones included) on this engine at once."""
    name: str = ""
    """Short name in logs, metrics (`env/host/<name>/...`) and trajectories; empty: the URL."""
    tls_ca_cert: str = ""
    """CA certificate (PEM) that signed the engine's certificate; `tcp://` only."""
    tls_client_cert: str = ""
    """Client certificate (PEM) for engines started with `--tlsverify`; with `tls_client_key`."""
    tls_client_key: str = ""
    """Key (PEM) of `tls_client_cert`."""
    ssh_identity_file: str = ""
    """Private key for an `ssh://` host (`ssh -i`, and no other key is tried); empty: the ssh
    agent or `~/.ssh/config`."""
    ssh_known_hosts: str = ""
    """known_hosts file that must hold the `ssh://` host's key (`UserKnownHostsFile`,
    `StrictHostKeyChecking=yes`); empty: `~/.ssh/known_hosts` and `~/.ssh/config`."""

    @model_validator(mode="after")
    def _check(self) -> DockerHost:
        scheme = self.url.partition("://")[0]
        if scheme not in ("unix", "tcp", "ssh") or "://" not in self.url:
            raise ValueError(f"host url {self.url!r}: use unix://, tcp:// or ssh://")
        tls = (self.tls_ca_cert, self.tls_client_cert, self.tls_client_key)
        if any(tls) and scheme != "tcp":
            raise ValueError(f"host {self.url}: tls_* paths need a tcp:// url")
        if (self.ssh_identity_file or self.ssh_known_hosts) and scheme != "ssh":
            raise ValueError(f"host {self.url}: ssh_* paths need an ssh:// url")
        if bool(self.tls_client_cert) != bool(self.tls_client_key):
            raise ValueError(f"host {self.url}: set tls_client_cert and tls_client_key together")
        return self

    @property
    def label(self) -> str:
        return self.name or self.url


class BwrapConfig(BaseModel):
    """The Docker-free backend (`FarmConfig.backend = "bwrap"`, `envs/bwrap/`): sandboxes are
    bubblewrap namespaces over a root filesystem exported once per image."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cache_dir: str = ""
    """Where exported root filesystems live, one directory per image id (plus a name index, so a
    node without Docker can use a cache filled elsewhere, e.g. on a shared filesystem). Empty:
    `<tmp>/swefleet-bwrap/rootfs`. Every directory above it must be world-traversable."""
    state_dir: str = ""
    """Per-sandbox writable copies (workdir, home). Empty: `<tmp>/swefleet-bwrap/sandboxes`."""
    bwrap_path: str = ""
    """The bubblewrap executable. Empty: `bwrap` on `PATH`. E.g. the binary a rootfs bundle
    carries (`python -m swefleet.envs.bwrap.bundle import` puts it at `<cache_dir>/bin/bwrap`); every
    directory above it must be world-traversable."""
    host_uid_base: int = Field(200000, ge=1000)
    """When swefleet runs as root, each sandbox runs as its own unprivileged host uid from
    `host_uid_base` up (so RLIMIT_NPROC counts per sandbox and sandboxes cannot touch each
    other's files); its files are owned by it. Not root: sandboxes run as the caller's uid."""


class FarmConfig(BaseModel):
    """How the farm creates, pools, limits and reaps sandboxes."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["docker", "bwrap"] = "docker"
    """Sandbox backend of the farm and the grader: `docker` (containers through the Docker
    engine) or `bwrap` (bubblewrap namespaces, for machines without a Docker engine, e.g. GPU
    nodes; needs the `bubblewrap` package or a bundle's `bwrap`, and root or unprivileged user
    namespaces; limits via rlimits: `memory_mb` caps each process's address space, `pids_limit` RLIMIT_NPROC, `max_file_mb` RLIMIT_FSIZE; `cpus`
    and `disk_budget_mb` are not enforced). See `envs/bwrap/`."""
    bwrap: BwrapConfig = Field(default_factory=BwrapConfig)
    """Settings of the `bwrap` backend."""
    hosts: list[DockerHost] = Field(default_factory=list)
    """Docker engines the sandboxes are spread over: each new sandbox goes to the least-loaded
    healthy host under its `max_sandboxes`; a host whose engine fails is drained and its running
    episodes end `infra_error` (docs/hosts.md). Empty: the local engine from the environment
    (`DOCKER_HOST` or the default socket)."""
    host_check_interval_s: float = Field(2.0, gt=0)
    """Period of the health probe (`/_ping`) of every host; one that does not answer is drained."""
    host_readmit_s: float = Field(60.0, gt=0)
    """A drained host is probed again this long after it was drained (and again this long after
    each failed try) and re-admitted when its engine answers (a restarted engine, a network
    that came back); `inf` keeps a drained host out for the rest of the run."""
    host_failures: int = Field(3, ge=1)
    """Engine errors in a row (creating or reaching a sandbox, not a command's failure) after
    which a host that still answers its probe is drained anyway."""

    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    """Default limits of every sandbox (a task may override them, see `SandboxLimits.for_task`)."""
    max_concurrent: int = Field(8, ge=1)
    """Most sandboxes handed out at once; `acquire` waits for a free slot (warm-pool sandboxes
    waiting to be handed out do not count)."""
    create_rate_per_s: float = Field(4.0, gt=0)
    """Most container creations per second (cold and warm-pool together); protects the daemon."""
    create_attempts: int = Field(3, ge=1)
    """Attempts to create and start a sandbox before `InfraError` (daemon errors, a container that
    died during start-up)."""
    warm_pool_size: int = Field(0, ge=0)
    """Pre-started sandboxes kept per (image, limits); refilled in the background after every
    hand-out. 0 turns the pool off."""
    warm_ttl_s: float = Field(600.0, gt=0)
    """A warm sandbox older than this is removed instead of handed out (must be well below
    `limits.lifetime_s`)."""
    command_timeout_s: float = Field(120.0, gt=0)
    """Default per-command timeout; on expiry the command's process group is killed inside the
    container and the session stays usable."""
    output_max_bytes: int = Field(32768, ge=256)
    """Output kept per command: the first and last halves; the middle is replaced by a marker
    saying how many bytes were cut."""
    output_kill_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    """A command that writes more than this is killed (its output is still capped as above)."""
    patch_max_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    """Most bytes the files changed by the agent may hold for `diff()` to make a patch of them
    (new content); more raises `envs.sandbox.PatchTooLarge`, a `DiskBudgetExceeded`: the episode
    ends with `limit_disk`, scored 0, instead of a diff that runs out of memory or a patch of
    hundreds of MB in the trajectory and the grader."""
    read_file_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    """Largest file `read_file` returns (the whole file is held in memory); a larger one raises
    `OSError` (EFBIG), which the agent's file tools show as an error."""
    kill_grace_s: float = Field(5.0, gt=0)
    """After killing a timed-out command, how long to wait for the shell to report back before the
    session is restarted (state such as cwd is then lost)."""
    session_start_timeout_s: float = Field(30.0, gt=0)
    """Deadline for the shell session of a new sandbox to answer."""
    docker_timeout_s: float = Field(120.0, gt=0)
    """Timeout of one Docker API call."""
    reap_interval_s: float = Field(60.0, gt=0)
    """Period of the reaper that removes containers past their lifetime (any run) and containers of
    dead runs."""
    disk_check_interval_s: float = Field(5.0, gt=0)
    """Period of the disk-budget watchdog (`SandboxLimits.disk_budget_mb`): one Docker call per
    pass (`GET /containers/json?size=1` for this run's containers, in a thread), about 20 ms for
    a few sandboxes; a pass starts only after the previous one ended."""
    reap_grace_s: float = Field(60.0, ge=0)
    """Extra age beyond `lifetime_s` before the reaper removes a container that should have ended."""
    session_env: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_SESSION_ENV))
    """Environment of the agent's shell session (pagers off, progress bars off, UTF-8)."""
    grading: GradingConfig = Field(default_factory=GradingConfig)
    """Grading: what the grader protects from the model patch and its resources (deadline,
    memory, CPUs, processes, parallelism); `envs.backends.make_grader`."""
    image_user: Literal["derive", "image", "agent"] = "derive"
    """How task images run (sandboxes and grading, Docker backend; `envs/derived_image.py`):
    `derive` builds once, locally, a thin cached layer on an image swefleet did not build
    that adds the uid-1000 `agent` user, gives it the workdir and trusts it in git (any image
    with the repository at its workdir works: SWE-bench's, a root-owned `/testbed`, a conda
    env on the image's PATH); `image` runs commands as the image's own user (its `USER`, root
    when unset), changing nothing; `agent` uses the image as it is, as the `agent` user it must
    have. Recorded per episode as `image_user`. The bwrap backend runs every image as its own
    uid 1000: another value than `derive` there is a config error."""

    @model_validator(mode="after")
    def _ttl_below_lifetime(self) -> FarmConfig:
        if self.warm_pool_size and self.warm_ttl_s >= self.limits.lifetime_s / 2:
            raise ValueError("warm_ttl_s must be below half of limits.lifetime_s")
        return self

    @model_validator(mode="after")
    def _settings_take_effect(self) -> FarmConfig:
        if self.backend == "bwrap" and self.grading.cpus != 1.0:
            raise ValueError("grading.cpus: the bwrap backend cannot enforce a CPU quota")
        if self.backend == "bwrap" and self.image_user != "derive":
            raise ValueError("image_user: the bwrap backend runs every image as its own uid "
                             "1000 (only the docker backend has this choice)")
        return self
