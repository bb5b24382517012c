"""The test runner that runs inside the sandbox, next to the untrusted program.

`grpo_core.rewards.code` runs this file as the sandbox's main program. It reads a job from stdin
(marshal: it comes from the parent, and needs no import):

    {"nonce": "...", "setup": "...", "program": "...",
     "tests": [{"expr": "f(3)", "checked": False}, {"code": "check(f)"}, ...]}

executes setup then program in one namespace, then each test, and writes one JSON line per test
to fd 3 (a pipe only the parent reads) as soon as it is done, so tests that passed before a hang
or crash still count:

    {"n": nonce, "i": 0, "v": <the value of "expr", as plain data>}   value tests
    {"n": nonce, "i": 1, "ok": true}                                  statement tests
    {"n": nonce, "i": 2, "error": "ZeroDivisionError"}

Value tests only send the value back: the parent holds the expected value and compares. Values
must be exact builtin types (`encode`): an object with a forged `__eq__` cannot even be sent.
Tests marked "checked", and statement tests, run with every callable the program defined
wrapped so that what it returns is copied into plain data first, and with a copy of the builtins
taken before the program ran. The program runs in this process, so none of this stops a program
that goes looking for this module's state; that is the parent's threat model to state.

The parent imports `encode`/`decode` from here; nothing runs on import. The json module is not
imported (its `re` import would double the start-up time of every sandboxed program): `_dumps`
writes the little JSON that `encode` produces.
"""

import builtins
import marshal
import os
import sys
from _json import encode_basestring_ascii as _quote

CHANNEL_FD = 3
_PRISTINE_BUILTINS = dict(vars(builtins))
_write = os.write
_INF = float("inf")


def encode(x: object) -> object:
    """`x` as JSON-able data, if it is made of exact builtin types only; else TypeError."""
    t = type(x)
    if x is None or t is bool or t is int or t is float or t is str:
        return x
    if t is list or t is tuple or t is set or t is frozenset:
        return {t.__name__: [encode(v) for v in x]}
    if t is dict:
        return {"dict": [[encode(k), encode(v)] for k, v in x.items()]}
    if t is bytes:
        return {"bytes": x.hex()}
    if t is complex:
        return {"complex": [x.real, x.imag]}
    raise TypeError(f"a test value must be plain data, not {t.__name__}")


_CONTAINERS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}


def decode(x: object) -> object:
    """The inverse of `encode` (on its output; anything else raises)."""
    if type(x) is not dict:
        if type(x) is list:
            raise ValueError("an untagged list")
        return x
    ((tag, v),) = x.items()
    if tag in _CONTAINERS:
        return _CONTAINERS[tag](decode(e) for e in v)
    if tag == "dict":
        return {decode(k): decode(val) for k, val in v}
    if tag == "bytes":
        return bytes.fromhex(v)
    if tag == "complex":
        return complex(*v)
    raise ValueError(f"unknown tag {tag!r}")


def _dumps(x: object) -> str:
    """JSON text of `x`, made of what `encode` returns and dicts with str keys."""
    t = type(x)
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        return int.__repr__(x)
    if t is float:
        if x != x:
            return "NaN"
        if x == _INF or x == -_INF:
            return "Infinity" if x > 0 else "-Infinity"
        return float.__repr__(x)
    if t is str:
        return _quote(x)
    if t is list:
        return "[" + ",".join([_dumps(v) for v in x]) + "]"
    if t is dict:
        return "{" + ",".join([_quote(k) + ":" + _dumps(v) for k, v in x.items()]) + "}"
    raise TypeError(f"cannot write {t.__name__}")


def _plain_results(fn):
    def plain(*args, **kwargs):
        return decode(encode(fn(*args, **kwargs)))

    return plain


def _send(line: str) -> None:
    data = (line + "\n").encode()
    while data:
        data = data[_write(CHANNEL_FD, data) :]


def _error(nonce: str, i: int, exc: BaseException) -> str:
    try:
        return _dumps({"n": nonce, "i": i, "error": str(type(exc).__name__)})
    except BaseException:  # a class whose name is itself hostile
        return _dumps({"n": nonce, "i": i, "error": "?"})


def main() -> None:
    job = marshal.loads(sys.stdin.buffer.read())
    nonce = job.pop("nonce")
    ns = {"__name__": "__solution__", "__builtins__": builtins}
    try:
        exec(compile(job["setup"], "<setup>", "exec"), ns)
        setup = dict(ns)
        exec(compile(job["program"], "<program>", "exec"), ns)
    except BaseException as exc:  # the program's own failure: every test fails
        _send(_error(nonce, -1, exc))
        import traceback

        traceback.print_exc()
        return
    # Tests see the program's names, then setup's names again (the program may not replace
    # setup's helpers), and the builtins as they were before the program ran.
    plain = dict(ns)
    plain.update(setup)
    plain["__builtins__"] = dict(_PRISTINE_BUILTINS)
    checked = dict(plain)
    for name, value in ns.items():
        if callable(value) and not issubclass(type(value), type) and name not in setup:
            checked[name] = _plain_results(value)
    for i, test in enumerate(job["tests"]):
        try:
            if "expr" in test:
                env = checked if test["checked"] else plain
                value = eval(compile(test["expr"], f"<test {i}>", "eval"), env)
                line = _dumps({"n": nonce, "i": i, "v": encode(value)})
            else:
                exec(compile(test["code"], f"<test {i}>", "exec"), checked)
                line = _dumps({"n": nonce, "i": i, "ok": True})
        except BaseException as exc:
            line = _error(nonce, i, exc)
        _send(line)


if __name__ == "__main__":
    main()
