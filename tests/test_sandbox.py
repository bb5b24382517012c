"""Hostile programs against the sandbox and the code reward.

Each program must end within its limits with reward 0 while this test process and the machine
stay unharmed; where a program reports what it saw, the test checks that report too, so a
reward of 0 cannot come from the program merely crashing. The fake-pass programs do not
implement `add` correctly, so their honest reward is 0 as well.
"""

import json
import os
import signal
import socket
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from grpo_core.rewards.code import CodeRewardConfig, check_code, sandbox_limits
from grpo_core.rewards.sandbox import network_isolation_available, run_python

ADD = json.dumps(
    {
        "entry_point": "add",
        "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(-1, 1) == 0"],
    }
)
CFG = CodeRewardConfig(
    workers=1, timeout_s=2.0, cpu_time_s=1, memory_mb=256, max_output_bytes=1 << 16
)
LIMITS = sandbox_limits(CFG)
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not ROOT, reason="without root the sandbox runs programs as the caller's uid (see sandbox.py)"
)


def program(text: str, **values: object) -> str:
    """Dedent `text` and substitute {name} placeholders with repr(values)."""
    return textwrap.dedent(text).format(**{k: repr(v) for k, v in values.items()})


def hostile(code: str, answer: str = ADD):
    """Check `code` (a completion) under the short limits; the run must end within them."""
    check = check_code(code, answer, CFG)
    assert check.sandbox.wall_s < CFG.timeout_s + 1.5
    return check


def report(check) -> dict:
    """The JSON line the program printed first (what it saw)."""
    return json.loads(check.sandbox.stdout.splitlines()[0])


def survivors(workdir: str) -> list[int]:
    """Processes whose cwd is (under) the given work dir: the program's, if any survive."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(workdir):
            found.append(int(pid))
    return found


# --- resource exhaustion ------------------------------------------------------------------------


def test_infinite_loop_is_stopped_by_the_cpu_limit():
    check = hostile("def add(a, b):\n    return a + b\nwhile True:\n    pass\n")
    assert check.reward() == 0.0
    assert check.sandbox.killed  # by RLIMIT_CPU (1 s), or the wall limit on a busy machine


def test_sleeping_program_is_stopped_by_the_wall_limit():
    check = hostile("import time\ntime.sleep(60)\ndef add(a, b):\n    return a + b\n")
    assert check.reward() == 0.0
    assert check.sandbox.timed_out


@pytest.mark.parametrize("namespaces", [True, False], ids=["pid-namespace", "no-namespace"])
def test_fork_bomb_leaves_no_process_behind(namespaces):
    if not namespaces and not ROOT:
        pytest.skip("without root or namespaces, only the process group is killed")
    code = """
        import os
        os.write(1, (os.getcwd() + "\\n").encode())
        while True:
            os.fork()
    """
    limits = replace(LIMITS, namespaces=namespaces)
    result = run_python(program(code), limits=limits)
    workdir = result.stdout.decode().splitlines()[0]
    assert result.wall_s < LIMITS.timeout_s + 1.5
    assert survivors(workdir) == []
    assert not Path(workdir).exists()
    assert hostile(program(code)).reward() == 0.0


@pytest.mark.parametrize("namespaces", [True, False], ids=["pid-namespace", "no-namespace"])
def test_setsid_double_fork_daemon_is_killed(namespaces):
    if not namespaces and not ROOT:
        pytest.skip("without root or namespaces, a process that calls setsid survives")
    code = """
        import os, time
        print(os.getcwd(), flush=True)
        started, tell = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(1, b"daemon started\\n")
                os.write(tell, b"!")
                time.sleep(60)
            os._exit(0)
        os.read(started, 1)  # the program's first process ends once the daemon runs
    """
    limits = replace(LIMITS, namespaces=namespaces)
    result = run_python(program(code), limits=limits)
    workdir, started = result.stdout.decode().splitlines()[:2]
    assert started == "daemon started"
    assert not result.timed_out  # the run ended with its first process
    assert survivors(workdir) == []


def test_memory_bomb_fails_inside_its_limit():
    code = """
        blocks = []
        while True:
            blocks.append(bytearray(1 << 24))
        def add(a, b):
            return a + b
    """
    check = hostile(program(code))
    assert check.reward() == 0.0
    assert b'"error":"MemoryError"' in check.sandbox.channel


def test_huge_output_is_capped_and_killed():
    check = hostile("def add(a, b):\n    return a + b\nwhile True:\n    print('x' * 10000)\n")
    assert check.reward() == 0.0
    assert check.sandbox.output_capped
    assert len(check.sandbox.stdout) + len(check.sandbox.stderr) <= CFG.max_output_bytes


def test_huge_file_is_capped():
    code = """
        import json
        try:
            with open("big", "wb") as f:
                f.write(b"x" * (4 << 20))
            outcome = "written"
        except OSError as exc:
            outcome = exc.strerror
        print(json.dumps({{"outcome": outcome}}))
    """
    check = hostile(program(code))
    assert check.reward() == 0.0
    assert report(check) == {"outcome": "File too large"}


def test_filling_the_disk_is_capped():
    if not (ROOT and network_isolation_available()):
        pytest.skip("the private size-limited tmpfs needs root and namespaces")
    code = """
        import json, os
        written = 0
        try:
            for i in range(100000):
                for where in (".", "/tmp", "/dev/shm"):
                    with open(f"{{where}}/f{{i}}", "wb") as f:
                        f.write(b"x" * (1 << 15))  # under the file size limit
                    written += 1 << 15
            outcome = "written"
        except OSError as exc:
            outcome = exc.strerror
        print(json.dumps({{"outcome": outcome, "bytes": written}}))
    """
    check = hostile(program(code))
    assert check.reward() == 0.0
    assert report(check)["outcome"] == "No space left on device"
    assert report(check)["bytes"] <= 3 * LIMITS.disk_mb << 20


# --- escaping the sandbox ------------------------------------------------------------------------


def test_cannot_read_the_checkout():
    if not (ROOT and network_isolation_available()):
        pytest.skip("hiding paths needs root and a mount namespace")
    root = Path(__file__).resolve().parents[1]
    code = """
        import json, os
        seen = {{}}
        try:
            seen["listing"] = os.listdir({root})
        except OSError as exc:
            seen["listing"] = type(exc).__name__
        try:
            seen["read"] = open({path}).read()[:20]
        except OSError as exc:
            seen["read"] = type(exc).__name__
        print(json.dumps(seen))
    """
    check = hostile(program(code, root=str(root), path=str(root / "pyproject.toml")))
    seen = report(check)
    # Covered by an empty mount, or gone altogether when the checkout lies under /tmp (which
    # the sandbox replaces with a private tmpfs): either way nothing of it can be read.
    assert seen["listing"] in ([], "FileNotFoundError")
    assert seen["read"] == "FileNotFoundError"


@needs_root
def test_cannot_write_outside_its_dir_and_its_dir_is_removed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    leftover = Path("/tmp") / f"grpo-sandbox-test-leftover-{os.getpid()}"
    code = """
        import json, os
        seen = {{"cwd": os.getcwd()}}
        for path in ({victim}, {new}, "/etc/grpo-sandbox-test", {leftover}):
            try:
                with open(path, "w") as f:
                    f.write("owned")
                seen[path] = "written"
            except OSError as exc:
                seen[path] = type(exc).__name__
        with open("mine.txt", "w") as f:  # its own dir is writable
            f.write("fine")
        print(json.dumps(seen))
        def add(a, b):
            return None
    """
    check = hostile(
        program(code, victim=str(victim), new=str(tmp_path / "new.txt"), leftover=str(leftover))
    )
    seen = report(check)
    assert check.reward() == 0.0
    assert victim.read_text() == "original"
    assert not (tmp_path / "new.txt").exists()
    assert not Path("/etc/grpo-sandbox-test").exists()
    # Another uid's directory; with a mount namespace, a path its private /tmp hides.
    for path in (victim, tmp_path / "new.txt"):
        assert seen[str(path)] in ("PermissionError", "FileNotFoundError")
    assert seen[str(leftover)] == "written"  # /tmp is world-writable (or a private tmpfs), but:
    assert not leftover.exists()  # what it leaves there does not stay
    assert not Path(seen["cwd"]).exists()


@needs_root
def test_cannot_see_the_parents_environment(monkeypatch):
    secret = f"s3cr3t-{os.getpid()}-{time.time_ns()}"
    monkeypatch.setenv("GRPO_SANDBOX_TEST_SECRET", secret)
    code = """
        import json, os
        seen = {{"environ": {secret} in repr(dict(os.environ))}}
        for pid in sorted({{os.getppid(), {test_pid}, 1}}):
            try:
                with open(f"/proc/{{pid}}/environ", "rb") as f:
                    seen[str(pid)] = {secret}.encode() in f.read()
            except OSError as exc:
                seen[str(pid)] = type(exc).__name__
        print(json.dumps(seen))
        found = any(v is True for v in seen.values())
        def add(a, b):
            return a + b if found else None
    """
    check = hostile(program(code, secret=secret, test_pid=os.getpid()))
    seen = report(check)
    assert check.reward() == 0.0
    assert seen["environ"] is False
    assert seen[str(os.getpid())] == "PermissionError"  # this process's environ is unreadable
    assert True not in seen.values()


def test_cannot_connect_to_a_local_socket():
    if not network_isolation_available():
        pytest.skip("network namespaces are not available on this machine")
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        code = """
            import json, socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
                outcome = "connected"
            except OSError as exc:
                outcome = type(exc).__name__
            print(json.dumps({{"outcome": outcome}}))
            def add(a, b):
                return a + b if outcome == "connected" else None
        """
        check = hostile(program(code, port=server.getsockname()[1]))
        assert check.reward() == 0.0
        assert report(check)["outcome"] != "connected"
        with pytest.raises(BlockingIOError):
            server.accept()


@needs_root
def test_cannot_kill_its_parent():
    code = """
        import json, os, signal
        seen = {{}}
        # In a PID namespace its parent pid reads 0: kill(0) is then its own process group.
        for name, pid in (("test", {test_pid}), ("ppid", os.getppid())):
            try:
                os.kill(pid, signal.SIGKILL)
                seen[name] = "sent"
            except OSError as exc:
                seen[name] = type(exc).__name__
        print(json.dumps(seen))
        def add(a, b):
            return None
    """
    check = hostile(program(code, test_pid=os.getpid()))
    assert check.reward() == 0.0
    # Another uid's process; and in a PID namespace this process is not even visible.
    assert report(check)["test"] in ("PermissionError", "ProcessLookupError")
    os.kill(os.getpid(), 0)  # still here


# --- leaving early ------------------------------------------------------------------------------


@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)", "raise SystemExit"])
def test_exit_before_the_tests_run(exit_call):
    code = f"import os, sys\ndef add(a, b):\n    return a - b\n{exit_call}\n"
    check = hostile(code)
    assert check.reward() == 0.0
    assert not check.sandbox.killed


def test_exit_inside_the_function():
    check = hostile("import os\ndef add(a, b):\n    os._exit(0)\n")
    assert check.reward() == 0.0


# --- faking a pass --------------------------------------------------------------------------


FAKES = {
    "eq-always-true": """
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
    """,
    "int-subclass": """
        class Int(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def add(a, b):
            return Int(0)
    """,
    "patched-builtins": """
        import builtins
        builtins.AssertionError = type("Ignored", (Exception,), {})
        builtins.isinstance = lambda *args: True  # breaks json: the harness cannot report
        def add(a, b):
            return None
    """,
    "fake-pass-lines": """
        import json
        for i in range(3):
            print(json.dumps({"i": i, "ok": True}), "PASSED", flush=True)
        print("3 passed, 0 failed\\nALL TESTS PASSED", flush=True)
        def add(a, b):
            return None
    """,
    "forged-results-on-fds": """
        import json, os
        lines = "".join(
            json.dumps(m) + "\\n"
            for i, v in enumerate([3, 4, 0])
            for m in ({"i": i, "ok": True}, {"i": i, "v": v}, {"n": "0" * 32, "i": i, "v": v})
        ).encode()
        for fd in range(1, 64):
            try:
                os.write(fd, lines)
            except OSError:
                pass
        def add(a, b):
            return None
    """,
    "stolen-nonce": """
        import json, os, sys
        frame = sys._getframe(1)
        nonce = frame.f_locals["nonce"]
        for i in range(3):
            os.write(3, (json.dumps({"n": nonce, "i": i, "ok": True}) + "\\n").encode())
        def add(a, b):
            return None
    """,
    "patched-harness": """
        import sys
        harness = sys._getframe(1).f_globals
        harness["encode"] = lambda value: "PASS"
        harness["_dumps"] = lambda message: '{"ok": true, "n": "%s", "i": %d}' % (
            message["n"], message["i"])
        def add(a, b):
            return None
    """,
    "exit-at-exit": """
        import atexit, os
        atexit.register(lambda: os.write(3, b'{"i": 0, "ok": true}\\n'))
        def add(a, b):
            return None
    """,
}


# Proof that the attack ran (on the program's stdout or stderr), never on the result pipe:
# the program's process does not hold it, nor the nonce, nor the tester's state.
RAN = {
    "forged-results-on-fds": ("stdout", b'{"i": 0, "v": 3}'),
    "stolen-nonce": ("stderr", b"KeyError: 'nonce'"),
    "fake-pass-lines": ("stdout", b"ALL TESTS PASSED"),
}


@pytest.mark.parametrize("name", FAKES)
def test_fake_pass_earns_nothing(name):
    check = hostile(textwrap.dedent(FAKES[name]))
    assert check.passed == (False, False, False)
    if name in RAN:
        stream, text = RAN[name]
        assert text in getattr(check.sandbox, stream)
    for line in check.sandbox.channel.splitlines():  # the tester's lines only
        assert json.loads(line)["n"] != "0" * 32 and b'"ok":true' not in line


def test_patched_builtins_do_not_reach_the_tests():
    answer = json.dumps(
        {"entry_point": "add", "tests": ["assert abs(add(1, 2) - 3) < 1e-9", "assert add(1, 2)"]}
    )
    code = """
        import builtins
        builtins.abs = lambda x: 0
        builtins.AssertionError = type("Ignored", (Exception,), {})
        def add(a, b):
            return 0
    """
    check = hostile(textwrap.dedent(code), answer)
    assert check.passed == (False, False)
    assert b'"i":0,"error":"AssertionError"' in check.sandbox.channel  # with the true abs


def test_fake_objects_cannot_steer_a_tolerance_check():
    answer = json.dumps(
        {"entry_point": "add", "tests": ["assert abs(add(1, 2) - 3) < 1e-9", "assert add(1, 2)"]}
    )
    code = """
        class Anything:
            def __sub__(self, other):
                return self
            def __abs__(self):
                return self
            def __lt__(self, other):
                return True
            def __bool__(self):
                return True
        def add(a, b):
            return Anything()
    """
    assert hostile(textwrap.dedent(code), answer).passed == (False, False)


def test_program_cannot_replace_a_setup_helper():
    answer = json.dumps(
        {
            "entry_point": "add",
            "setup": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
            "tests": ["check(add)"],
        }
    )
    code = "def add(a, b):\n    return 0\ndef check(candidate):\n    pass\n"
    assert hostile(code, answer).passed == (False,)
    assert hostile("def add(a, b):\n    return a + b\n", answer).passed == (True,)


def test_host_is_unharmed_after_the_suite():
    # After every hostile program above: this process is alive, and an honest program still
    # gets full reward within normal time.
    os.kill(os.getpid(), 0)
    assert signal.getsignal(signal.SIGTERM) is not None
    check = hostile("def add(a, b):\n    return a + b\n")
    assert check.reward() == 1.0
    assert not check.sandbox.killed
