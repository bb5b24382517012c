"""The trusted first part of every sandboxed process (started by `grpo_core.rewards.sandbox`).

    python -s -S -P sandbox_boot.py CONFIG     run ./main.py under CONFIG (marshal, in hex)
    python -s -S -P sandbox_boot.py --probe    exit 0 if the namespaces can be created

It runs as the caller (root, usually) and is never imported. It enters fresh network, IPC, PID
and mount namespaces (where allowed), then forks: the child (PID 1 of the new PID namespace)
mounts its private tmpfs dirs, sets the resource limits, drops to the sandbox uid and executes
`main.py`; the parent stays behind as a supervisor that the program cannot signal (another uid),
and when the program ends, or when `grpo_core.rewards.sandbox` sends SIGTERM (timeout, output cap),
it
kills everything the program started, then exits with the program's status.

Dropping privileges here rather than in `subprocess.Popen(user=...)` is what lets the sandbox uid
run an interpreter installed under a directory it cannot enter (pyenv under /root): the
directories on `sys.path` are opened before the drop and imported from through /proc/self/fd.
It also keeps Popen on its cheap vfork path.
"""

import _signal as signal  # the C module: `signal` imports enum, 4 ms in every sandbox
import builtins
import marshal
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 1, 2, 4, 1 << 14, 1 << 18
# Where any uid may write: a private tmpfs for each, inside a mount namespace.
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
CHANNEL_FD = 3  # where the program finds the result channel, whatever the parent's number was
CALLS_FD, ANSWERS_FD = 3, 4  # with a tester: the program's ends of its two pipes
PR_SET_DUMPABLE = 4


def _libc_call(name: str, *args: int | bytes | None) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _namespace_flags() -> int:
    # Without root a user namespace is what makes the others allowed (no mount namespace then:
    # its unmapped uid could not write to a tmpfs of its own).
    flags = CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID
    return flags | CLONE_NEWNS if os.geteuid() == 0 else flags | CLONE_NEWUSER


def _private_tmp(cfg: dict) -> None:
    """An empty read-only tmpfs over each hidden path; size-limited tmpfs over the world-writable
    directories and over the work dir (recreated, empty, at the same path): what the program
    writes can neither fill the disk or memory nor outlive the run (the mount namespace dies with
    its last process)."""
    _libc_call("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)  # nothing leaks out
    work = os.getcwd()
    for path in cfg["hidden_paths"]:  # e.g. this checkout, with the dataset's gold answers
        if os.path.isdir(path) and not (work + os.sep).startswith(path.rstrip(os.sep) + os.sep):
            flags = MS_RDONLY | MS_NOSUID | MS_NODEV
            _libc_call("mount", b"tmpfs", path.encode(), b"tmpfs", flags, b"size=4k,mode=755")
    size = cfg["disk_bytes"]
    for path in WORLD_WRITABLE:
        if os.path.isdir(path):
            options = f"size={size},mode=1777".encode()
            _libc_call("mount", b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options)
    os.makedirs(work, exist_ok=True)
    options = f"size={size},mode=700,uid={cfg['uid']},gid={cfg['uid']}".encode()
    _libc_call("mount", b"tmpfs", work.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options)
    os.chdir(work)


def _tasks_of(uid: int) -> int:
    """Tasks (threads count: RLIMIT_NPROC counts them) whose real uid is `uid`."""
    count = 0
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def _keep_imports_reachable() -> None:
    # After setuid the standard library may sit below a directory the sandbox uid cannot
    # enter; a directory opened now stays reachable through /proc/self/fd.
    # Packages imported already (collections, encodings) find their submodules through
    # `__path__`, so those are moved too.
    moved = {}
    for path in sys.path:
        if os.path.isdir(path):
            moved[path] = f"/proc/self/fd/{os.open(path, os.O_RDONLY | os.O_DIRECTORY)}"
    sys.path[:] = moved.values()
    sys.path_importer_cache.clear()
    for module in list(sys.modules.values()):
        package_path = getattr(module, "__path__", None)
        if not isinstance(package_path, list):
            continue
        for i, entry in enumerate(package_path):
            for old, new in moved.items():
                if entry.startswith(old + os.sep):
                    package_path[i] = new + entry[len(old) :]


def _set_limits(cfg: dict) -> None:
    limits = {
        resource.RLIMIT_CPU: cfg["cpu_time_s"],
        resource.RLIMIT_AS: cfg["memory_bytes"],
        resource.RLIMIT_FSIZE: cfg["max_file_bytes"],
        resource.RLIMIT_NPROC: cfg["max_processes"],
        resource.RLIMIT_CORE: 0,
    }
    for which, value in limits.items():
        resource.setrlimit(which, (value, value))


def _child(cfg: dict, source: str, pipes: tuple[int, int, int, int] | None) -> None:
    """Become the program. Never returns."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    status = 1
    try:
        channel = cfg["channel_fd"]
        if pipes is not None:
            # With a tester the program gets its two pipes and nothing else of it: not the
            # result channel, and not stdin, which holds the tester's job.
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            if channel is not None:
                os.close(channel)
            calls, answers, mine_calls, mine_answers = pipes
            os.close(mine_calls)
            os.close(mine_answers)
            for fd, number in ((calls, CALLS_FD), (answers, ANSWERS_FD)):  # fds above 9
                os.dup2(fd, number, inheritable=False)
                os.close(fd)
        elif channel is not None and channel != CHANNEL_FD:
            os.dup2(channel, CHANNEL_FD, inheritable=False)
            os.close(channel)
        _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if cfg["uid"] is not None:
            _keep_imports_reachable()
            if cfg["namespaces"]:
                _private_tmp(cfg)
        _set_limits(cfg)
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
            if os.getuid() != cfg["uid"] or os.getegid() != cfg["uid"]:
                raise RuntimeError("privileges were not dropped")
        code = compile(source, "main.py", "exec")
    except BaseException as exc:
        print(f"sandbox boot failed: {exc!r}", file=sys.stderr, flush=True)
        os._exit(125)
    sys.argv = ["main.py"]
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
        status = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib costs an import in every sandboxed process)
            stream.flush()
        except BaseException:
            pass
    os._exit(status & 0xFF)


def _kill_all(pid: int, cfg: dict) -> int:
    """Kill the program and everything it started; return the program's wait status.

    `pid` must not have been reaped yet: until then its number cannot name another process.
    """
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    # With a PID namespace the kernel has now killed and reaped every process in it. Without
    # one, processes that left the process group (setsid, double fork) are found by uid:
    # kill(-1) as that uid reaches exactly the processes of that uid.
    if not cfg["namespaces"] and cfg["uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
        for _ in range(2):
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                break
    return status


def _high_pipe() -> tuple[int, int]:
    """A pipe whose ends are above fd 9, so moving them to 3 and 4 clobbers neither."""
    import fcntl

    ends = []
    for fd in os.pipe():
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    return ends[0], ends[1]


def _test(cfg: dict, tester: object, pipes: tuple[int, int, int, int]) -> None:
    """Run the tester here, in the supervisor: a process the program cannot read (another uid,
    and not dumpable, so not even the same uid can open its /proc files), talking to the
    program only through the two pipes. The program's end of the calls pipe closes after it:
    the program's process then exits."""
    calls, answers, mine_calls, mine_answers = pipes
    os.close(calls)
    os.close(answers)
    _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    names = {"__name__": "__tester__", "__builtins__": builtins}
    names.update(REQUESTS=mine_calls, REPLIES=mine_answers, RESULTS=cfg["channel_fd"])
    try:
        exec(tester, names)
    except BaseException:
        import traceback

        traceback.print_exc()
    os.close(mine_calls)


def _exit_like(status: int) -> None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def main() -> None:
    if sys.argv[1] == "--probe":
        _libc_call("unshare", _namespace_flags())
        return
    cfg = marshal.loads(bytes.fromhex(sys.argv[1]))  # marshal: no import, trusted data
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # If the caller dies, this process must not outlive it (SIGTERM runs the cleanup below). The
    # signal follows the caller's thread that started us, which waits for us to end first.
    _libc_call("prctl", PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != cfg["parent_pid"]:
        return
    if cfg["uid"] is None:
        # Without a uid of its own the program shares RLIMIT_NPROC with the caller's processes
        # (counted before a user namespace would hide whose they are).
        cfg["max_processes"] += _tasks_of(os.getuid())
    if cfg["namespaces"]:
        _libc_call("unshare", _namespace_flags())
    with open("main.py") as f:
        source = f.read()
    tester = pipes = None
    if cfg.get("tester"):
        with open("tester.py") as f:
            tester = compile(f.read(), "tester.py", "exec")
        calls, answers = _high_pipe(), _high_pipe()
        pipes = (calls[0], answers[1], calls[1], answers[0])

    child = []

    def on_term(signum: int, frame: object) -> None:
        if child:
            _kill_all(child[0], cfg)
        os.kill(os.getpid(), signal.SIGKILL)

    # SIGTERM stays blocked whenever the child's pid is not known or already reaped.
    signal.signal(signal.SIGTERM, on_term)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid == 0:
        _child(cfg, source, pipes)
    child.append(pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if tester is not None:
        _test(cfg, tester, pipes)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _exit_like(_kill_all(pid, cfg))


if __name__ == "__main__":
    main()
