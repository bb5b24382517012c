"""Run an untrusted Python program in a separate, limited process.

Used by the code reward (`grpo_core.rewards.code`) to execute model-written programs. Linux only.
`sandbox_boot.py` is the trusted code that starts each program; this module drives it.

What the program gets, when the caller is root (the training machines, CI):
  * its own uid (61000 and up, no passwd entry, one per concurrent run, claimed with a lock file
    under /run/grpo-sandbox so that concurrent trainers on one machine never share one), no
    groups, no_new_privs. So RLIMIT_NPROC counts only its own processes, and it cannot write the
    caller's files, read /proc/<pid>/environ of other processes or signal them (the caller
    included).
  * fresh network, IPC, PID and mount namespaces where the machine allows them (checked once:
    `network_isolation_available()`). No network at all, not even loopback. When the program's
    first process ends or is killed, the kernel kills every process it started, including
    those that called setsid or double-forked. Its work dir, /tmp, /var/tmp, /dev/shm and
    /run/lock are private tmpfs mounts of `disk_mb` each, gone with the run; `hidden_paths`
    (by default `default_hidden_paths()`: this checkout and the caller's working directory,
    which hold the dataset and its gold answers, a DVC cache configured outside them, and the
    Hugging Face caches, which hold downloaded benchmarks and their tests) are covered by
    empty ones.
    Without namespaces (a container without CAP_SYS_ADMIN) a warning is logged once, leftover
    processes are killed by uid (kill(-1) as that uid), and files it left in those directories
    are deleted afterwards (their size is then capped per file only).
  * limits: CPU time (RLIMIT_CPU), address space (RLIMIT_AS), processes (RLIMIT_NPROC), size of
    any file it writes (RLIMIT_FSIZE = the output cap), wall time (killed when it runs out), and
    stdout + stderr read through pipes up to `max_output_bytes` (killed when it writes more).
  * a fresh work dir (its cwd, HOME and TMPDIR) that is deleted afterwards, and a minimal
    environment (PATH, LANG, LC_ALL, HOME, TMPDIR, PYTHONHASHSEED=0, PYTHONDONTWRITEBYTECODE=1):
    nothing of the caller's.
  * the interpreter is `sys.executable` with -s -S -P: no site-packages, no user site, no script
    dir on sys.path. That is -I without -E: -E would ignore PYTHONHASHSEED (set iteration order
    must not make a reward random), and the environment is ours anyway.

Without root (a laptop) the program runs as you, and a warning says so: the same rlimits
(RLIMIT_NPROC set to your current task count plus `max_processes`), network, IPC and PID
namespaces through a user namespace where allowed, but no private tmpfs; it can read and write
what you can, read your processes' environments and signal them; and without namespaces, a
process that leaves the process group survives the run.

Not limited: CPU share (use fewer workers), reading world-readable files outside
`hidden_paths` (anywhere, without namespaces), kernel attack surface.
"""

from __future__ import annotations

import fcntl
import functools
import grp
import itertools
import logging
import marshal
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

BOOT = Path(__file__).with_name("sandbox_boot.py")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PYTHON = (sys.executable, "-s", "-S", "-P")
UID_BASE = 61000
UID_COUNT = 512
LOCK_DIR = Path("/run/grpo-sandbox")
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # as in sandbox_boot.py
CHANNEL_FD = 3  # the program's end of the result channel (the boot moves it there)
_READ = 65536


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 5.0  # wall clock
    cpu_time_s: int = 5
    memory_mb: int = 512  # address space
    max_output_bytes: int = 1 << 20  # stdout + stderr; also the channel, and each file
    max_processes: int = 16
    disk_mb: int = 64  # each private tmpfs (work dir, /tmp, /dev/shm...), root with namespaces
    # Directories it must not read (root with namespaces); None: `default_hidden_paths()`.
    hidden_paths: tuple[str, ...] | None = None
    namespaces: bool = True  # False: never use them, even where available (tests)


def _dvc_cache_dirs(repo: Path) -> list[str]:
    """The `[cache] dir` of a DVC repo's config files, resolved as DVC does (relative to
    .dvc/); a cache inside the repo is hidden with it."""
    found = []
    for name in ("config", "config.local"):
        path = repo / ".dvc" / name
        if not path.is_file():
            continue
        section = ""
        for line in path.read_text(errors="ignore").splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]'\" ").lower()
            elif section == "cache" and line.partition("=")[0].strip() == "dir":
                found.append(str((path.parent / line.partition("=")[2].strip()).resolve()))
    return found


def default_hidden_paths() -> tuple[str, ...]:
    """Where gold answers and tests lie on a training machine: this checkout, the working
    directory (the DVC repo the stages run in, when grpo_core is installed elsewhere), its DVC
    cache wherever it is configured, and the Hugging Face hub and datasets caches."""
    cwd = Path.cwd()
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    paths = [str(PROJECT_ROOT), str(cwd), *_dvc_cache_dirs(cwd), str(home)]
    for var in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            paths.append(os.environ[var])
    # Never the interpreter's standard library (a Python installed under the repo or home):
    # the program and its harness import from it after the paths are hidden.
    stdlib = os.path.dirname(os.__file__) + os.sep
    return tuple(
        p
        for p in dict.fromkeys(os.path.abspath(p) for p in paths)
        if not stdlib.startswith(p.rstrip(os.sep) + os.sep)
    )


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # negative: ended by that signal
    stdout: bytes
    stderr: bytes
    channel: bytes  # what the program wrote to fd 3 when run with channel=True
    timed_out: bool
    output_capped: bool
    wall_s: float

    @property
    def killed(self) -> bool:
        """Stopped by us (time, output) or by a signal (CPU limit, crash)."""
        return self.timed_out or self.output_capped or (self.returncode or 0) < 0


def run_python(
    source: str,
    *,
    stdin: bytes = b"",
    limits: SandboxLimits | None = None,
    channel: bool = False,
    tester: str | None = None,
) -> SandboxResult:
    """Run the Python program `source` in the sandbox; see the module docstring.

    With `channel=True` the program finds the write end of an extra pipe at fd 3: a way to
    report results that its stdout cannot be confused with.

    With `tester`, that source runs in the sandbox's supervisor while the program runs: it
    reads `stdin` (the program gets /dev/null), holds the channel (the program does not) and
    talks to the program through two pipes, the program's fds 3 (tester to program) and 4
    (program to tester), as names REQUESTS, REPLIES and RESULTS (the channel, or None) in its
    globals. It is trusted code: it runs as the caller, without the program's limits, in a
    process the program cannot read or write (sandbox_boot.py).
    """
    limits = limits or SandboxLimits()
    namespaces = limits.namespaces and network_isolation_available()
    with _sandbox_uid() as uid:
        work = Path(tempfile.mkdtemp(prefix="grpo-sandbox-"))
        try:
            if uid is not None:
                os.chown(work, uid, uid)
            (work / "main.py").write_text(source)
            if tester is not None:
                (work / "tester.py").write_text(tester)
            config = {
                "uid": uid,
                "namespaces": namespaces,
                "parent_pid": os.getpid(),
                "cpu_time_s": limits.cpu_time_s,
                "memory_bytes": limits.memory_mb << 20,
                "max_file_bytes": limits.max_output_bytes,
                "max_processes": limits.max_processes,
                "disk_bytes": limits.disk_mb << 20,
                "tester": tester is not None,
                "hidden_paths": [
                    os.path.abspath(p)
                    for p in (
                        default_hidden_paths()
                        if limits.hidden_paths is None
                        else limits.hidden_paths
                    )
                ],
            }
            result, clean = _run(config, work, stdin, limits, channel)
        finally:
            _remove_tree(work)
            if uid is not None and not namespaces:
                _remove_leftovers(uid)
        if uid is not None and not clean:
            _retired_uids.add(uid)
    return result


def _run(
    config: dict, work: Path, stdin: bytes, limits: SandboxLimits, channel: bool
) -> tuple[SandboxResult, bool]:
    read_end, write_end = os.pipe() if channel else (None, None)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [*PYTHON, str(BOOT), marshal.dumps({**config, "channel_fd": write_end}).hex()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=work,
            env=_environment(work),
            pass_fds=() if write_end is None else (write_end,),
            process_group=0,
        )
    except BaseException:
        if read_end is not None:
            os.close(read_end)
        raise
    finally:
        if write_end is not None:
            os.close(write_end)
    with proc:
        streams = {"stdout": proc.stdout.fileno(), "stderr": proc.stderr.fileno()}
        if read_end is not None:
            streams["channel"] = read_end
        out = _Output(streams, limits.max_output_bytes)
        try:
            timed_out = not _wait(proc, stdin, out, start + limits.timeout_s)
            clean = _stop(proc)
            out.drain(time.monotonic() + 1.0)
        finally:
            if read_end is not None:
                os.close(read_end)
    result = SandboxResult(
        returncode=proc.returncode,
        stdout=bytes(out.data["stdout"]),
        stderr=bytes(out.data["stderr"]),
        channel=bytes(out.data.get("channel", b"")),
        timed_out=timed_out,
        output_capped=out.capped,
        wall_s=time.monotonic() - start,
    )
    return result, clean


@functools.cache
def network_isolation_available() -> bool:
    """Whether fresh network (and PID, IPC) namespaces can be created here; checked once."""
    probe = subprocess.run(
        [*PYTHON, str(BOOT), "--probe"], capture_output=True, text=True, env=_environment("/")
    )
    if probe.returncode != 0:
        log.warning(
            "sandbox: no network/PID namespaces here (%s): programs can reach the network, and "
            "their leftover processes are killed by uid or process group only",
            probe.stderr.strip().splitlines()[-1:] or probe.returncode,
        )
        return False
    return True


def _environment(work: Path | str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": str(work),
        "TMPDIR": str(work),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


class _Output:
    """The program's pipes, read up to a shared byte cap (stdout + stderr; the channel alone)."""

    def __init__(self, fds: dict[str, int], cap: int) -> None:
        self.fds = fds
        self.cap = cap
        self.data = {name: bytearray() for name in fds}
        self.capped = False
        self.open = set(fds)

    def read(self, name: str) -> None:
        chunk = os.read(self.fds[name], _READ)
        if not chunk:
            self.open.discard(name)
            return
        self.data[name] += chunk
        shared = ("stdout", "stderr") if name != "channel" else ("channel",)
        excess = sum(len(self.data[n]) for n in shared) - self.cap
        if excess > 0:
            del self.data[name][-excess:]
            self.capped = True

    def drain(self, deadline: float) -> None:
        """Read what is left once every writer is gone (or the deadline passes)."""
        with selectors.DefaultSelector() as sel:
            for name in self.open:
                sel.register(self.fds[name], selectors.EVENT_READ, name)
            while self.open and not self.capped and (left := deadline - time.monotonic()) > 0:
                for key, _ in sel.select(left):
                    self.read(key.data)
                    if key.data not in self.open:
                        sel.unregister(key.fileobj)


def _wait(proc: subprocess.Popen, stdin: bytes, out: _Output, deadline: float) -> bool:
    """Feed stdin and read output until the program ends; False if the deadline passed first."""
    pidfd = os.pidfd_open(proc.pid)
    sel = selectors.DefaultSelector()
    try:
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        for name in out.open:
            sel.register(out.fds[name], selectors.EVENT_READ, name)
        if stdin:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
        else:
            proc.stdin.close()
        pending = memoryview(stdin)
        while (left := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(left):
                if key.data == "exit":
                    return True
                if key.data == "stdin":
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending[:_READ]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                out.read(key.data)
                if key.data not in out.open:
                    sel.unregister(key.fileobj)
                if out.capped:
                    return True
        return False
    finally:
        sel.close()
        os.close(pidfd)


def _stop(proc: subprocess.Popen) -> bool:
    """End the boot and its process group; True if the boot cleaned up after the program.

    The boot is reaped last, so its pid (the group id) cannot be reused while we signal it.
    """
    clean = True
    with selectors.DefaultSelector() as sel:
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
        if not sel.select(0):
            os.kill(proc.pid, signal.SIGTERM)  # the boot kills the program's processes, exits
            clean = bool(sel.select(2.0))
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(pidfd)
    proc.wait()
    if not clean:
        log.error("sandbox: the supervisor did not stop in time; its uid is retired")
    return clean


@functools.cache
def _free_uids() -> tuple[int, ...]:
    # A uid or gid some account uses must never be ours: kill(-1) as that uid would reach it.
    taken = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
    return tuple(u for u in range(UID_BASE, UID_BASE + UID_COUNT) if u not in taken)


_next_uid = itertools.count()
# Uids whose processes may have outlived a run: their locks are kept until we exit.
_retired_uids: set[int] = set()


@contextmanager
def _sandbox_uid() -> Iterator[int | None]:
    """A uid no other run (in any process) uses meanwhile; None when we are not root."""
    if os.geteuid() != 0:
        _warn_not_root()
        yield None
        return
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    st = LOCK_DIR.lstat()
    if st.st_uid != 0 or st.st_mode & 0o077:
        raise RuntimeError(f"{LOCK_DIR} must be a directory owned by root with mode 0700")
    uids = _free_uids()
    for _ in range(len(uids)):
        uid = uids[next(_next_uid) % len(uids)]
        if uid in _retired_uids:
            continue
        fd = os.open(LOCK_DIR / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            if uid not in _retired_uids:
                os.close(fd)
        return
    raise RuntimeError(f"all {len(uids)} sandbox uids are in use")


@functools.cache
def _warn_not_root() -> None:
    log.warning(
        "sandbox: not running as root, so programs run as your uid: they can read and write "
        "your files and signal your processes (only the resource limits and the network and "
        "PID namespaces apply)"
    )


def _remove_tree(path: str | Path) -> None:
    def writable_and_retry(func, p, exc_info):  # a program may leave read-only dirs behind
        os.chmod(os.path.dirname(p), 0o700)
        func(p)

    shutil.rmtree(path, onerror=writable_and_retry)


def _remove_leftovers(uid: int) -> None:
    """Delete what the program left in world-writable directories (its processes are dead)."""
    for top in WORLD_WRITABLE:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    _remove_tree(entry.path)
                else:
                    os.unlink(entry.path)
            except FileNotFoundError:  # someone else's, removed meanwhile
                continue
            except OSError as exc:
                log.warning("sandbox: could not remove %s: %s", entry.path, exc)
