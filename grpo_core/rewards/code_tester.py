"""The tests' half of the code reward's harness: it runs in the sandbox's supervisor, a process
the program never shares memory, file descriptors or builtins with (after the source of
`plain.py`; `sandbox_boot.py` executes it with the globals REQUESTS, REPLIES and RESULTS).

It reads the job from stdin (marshal, from the parent; the program's process was forked before
and never sees it):

    {"nonce": "...", "setup": "...", "prefix": "...", "program": "...", "entry_point": "f",
     "tests": ["assert f(3) == 9", "check(f)", ...], "cap": bytes}

sends the program (not the setup, which may define the tests, as HumanEval's `check` does) to
the program's process (`code_runner.py`), and runs every test here,
in a namespace of its own: the answer's prefix (a HumanEval prompt's imports and helpers), its
setup, and for the entry point and each other callable the program defined a proxy. Calling a
proxy sends the call's arguments (plain data only) to the program's process and returns what
comes back, decoded as plain data, or raises the builtin exception the program raised
(`ProgramError` for any other). So a test sees only values; the program can neither reach the
test's frames, its builtins or its helpers, nor write a result: the results are this process's.

Before the program's tests, the same tests run against each trivial entry point (`TRIVIAL`:
the prompt's stub, which returns None, a constant, or its first argument unchanged). What they
pass is the baseline a program must beat to earn partial credit (`grpo_core.rewards.code`).

One JSON line per test goes to RESULTS as soon as it is known:

    {"n": nonce, "i": 0, "trivial": [0, 2]}   trivial programs 0 and 2 pass test 0
    {"n": nonce, "i": 0, "ok": true}          the program passes test 0
    {"n": nonce, "i": 1, "error": "AssertionError"}
    {"n": nonce, "i": -1, "error": "SyntaxError"}      the program did not load: all fail
"""

import builtins
import marshal
import os
import sys


class ProgramError(Exception):
    """The program raised an exception that is not one of the builtin `Exception`s."""


class ProgramGone(Exception):  # noqa: N818 (what a test sees when the program cannot answer)
    """The program's process ended, or answered with something that is not plain data."""


def _exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise ProgramGone("the program's process ended")
        data += chunk
    return data


class Program:
    """The program's process, seen through its two pipes."""

    def __init__(self, requests: int, replies: int, cap: int) -> None:
        self.requests, self.replies, self.cap = requests, replies, cap
        self.gone = False

    def send(self, message: object) -> None:
        data = marshal.dumps(message)
        data = len(data).to_bytes(4, "little") + data
        while data:
            data = data[os.write(self.requests, data) :]

    def receive(self) -> dict:
        if self.gone:
            raise ProgramGone("the program's process ended")
        try:
            size = int.from_bytes(_exactly(self.replies, 4), "little")
            if size > self.cap:
                raise ProgramGone(f"an answer of {size} bytes")
            message = loads(_exactly(self.replies, size).decode())  # noqa: F821 (plain.py's)
            if type(message) is not dict or len(message) != 1:
                raise ProgramGone("an answer that is not a message")
            return message
        except BaseException:
            self.gone = True  # out of step with the program now: nothing later is trusted
            raise

    def call(self, name: str, args: tuple, kwargs: dict) -> object:
        if self.gone:
            raise ProgramGone("the program's process ended")
        encode((args, kwargs))  # noqa: F821 (plain.py's): TypeError unless plain data
        try:
            self.send((name, args, kwargs))
        except OSError:
            self.gone = True
            raise ProgramGone("the program's process ended") from None
        message = self.receive()
        if "v" in message:
            try:
                return decode(message["v"])  # noqa: F821 (plain.py's)
            except Exception:
                self.gone = True
                raise ProgramGone("an answer that is not plain data") from None
        _raise(message.get("error"))


def _raise(error: object) -> None:
    kind = getattr(builtins, error, None) if type(error) is str else None
    if isinstance(kind, type) and issubclass(kind, Exception):
        raise kind(f"raised by the program: {error}")
    raise ProgramError(str(error)[:100])


def _proxy(program: Program, name: str):
    def call(*args, **kwargs):
        return program.call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _undefined(name: str):
    def call(*args, **kwargs):
        raise ProgramError(f"the program does not define {name}")

    return call


def _first(*args, **kwargs) -> object:
    return args[0] if args else None


# The programs that solve nothing: the prompt's stub (`pass`, `return None`), a constant, and
# the identity. The parent knows them by index (`grpo_core.rewards.code.TRIVIAL`).
TRIVIAL = (
    lambda *a, **k: None,
    lambda *a, **k: True,
    lambda *a, **k: False,
    lambda *a, **k: 0,
    lambda *a, **k: 1,
    lambda *a, **k: "",
    lambda *a, **k: [],
    _first,
)


def _send(nonce: str, i: int, **fields: object) -> None:
    if RESULTS is None:  # noqa: F821 (given by sandbox_boot.py)
        return
    data = (dumps({"n": nonce, "i": i, **fields}) + "\n").encode()  # noqa: F821
    while data:
        data = data[os.write(RESULTS, data) :]  # noqa: F821


def _error(exc: BaseException) -> str:
    return str(type(exc).__name__)


def _run(tests: list, ns: dict, seeded: bool):
    """(i, None) for each test that passes in `ns`, (i, exception) for each that fails."""
    for i, code in enumerate(tests):
        if seeded:  # HumanEval's random tests, the same cases on every run
            sys.modules["random"].seed(i)
        try:
            exec(code, dict(ns))
        except Exception as exc:
            yield i, exc
        else:
            yield i, None


def main() -> None:
    job = marshal.loads(sys.stdin.buffer.read())
    nonce, entry = job["nonce"], job["entry_point"]
    program = Program(REQUESTS, REPLIES, job["cap"])  # noqa: F821 (given by sandbox_boot.py)
    try:
        program.send({"program": job["program"]})  # not the setup: it may hold the tests
    except OSError:
        program.gone = True
    texts = (job["prefix"], job["setup"], *job["tests"])
    seeded = any("random" in t for t in texts)
    if seeded:
        import random  # noqa: F401 (seeded before each test)
    trusted = {"__name__": "__tests__", "__builtins__": builtins}
    exec(compile(job["prefix"], "<prefix>", "exec"), trusted)
    exec(compile(job["setup"], "<setup>", "exec"), trusted)
    tests = [compile(t, f"<test {i}>", "exec") for i, t in enumerate(job["tests"])]

    trivial = [[] for _ in tests]
    for k, stand_in in enumerate(TRIVIAL if entry is not None else TRIVIAL[:1]):
        ns = dict(trusted)
        if entry is not None:
            ns[entry] = stand_in
        for i, failure in _run(tests, ns, seeded):
            if failure is None:
                trivial[i].append(k)
    for i, passing in enumerate(trivial):
        _send(nonce, i, trivial=passing)

    try:
        loaded = program.receive()
    except ProgramGone as exc:
        loaded = {"error": _error(exc)}
    if "defined" not in loaded or type(loaded["defined"]) is not list:
        _send(nonce, -1, error=str(loaded.get("error"))[:100])
        return
    defined = {n for n in loaded["defined"] if type(n) is str and n.isidentifier()}
    ns = dict(trusted)
    ns.update((name, _proxy(program, name)) for name in defined - set(trusted))
    if entry is not None:  # the prompt's stub never stands in for it
        ns[entry] = _proxy(program, entry) if entry in defined else _undefined(entry)
    for i, failure in _run(tests, ns, seeded):
        if failure is None:
            _send(nonce, i, ok=True)
        else:
            _send(nonce, i, error=_error(failure))


if __name__ == "__tester__":  # sandbox_boot.py runs it so
    main()
