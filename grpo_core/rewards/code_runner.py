"""The program's half of the code reward's harness: it runs in the sandbox, as the untrusted
program's own process (its main.py, after the source of `plain.py`).

It knows nothing of the tests. It reads from fd 3 (length-prefixed marshal, written by the
tester in the sandbox's supervisor) first `{"program": ...}`, which it executes, answering
`{"defined": [names of the callables the program defined]}` or `{"error": "NameOfException"}`;
then calls `(name, args, kwargs)` of plain data, each answered with `{"v": <the value
returned, encoded as plain data>}` or `{"error": ...}` on fd 4 (length-prefixed JSON).
It exits when fd 3 closes.

The program runs in this process and may rewrite any of this: nothing here is trusted. The
tester reads every answer as untrusted plain data (`code_tester.py`).
"""

import builtins
import marshal
import os

REQUESTS = 3
REPLIES = 4
_read = os.read
_write = os.write


def _exactly(n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = _read(REQUESTS, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _receive() -> object:
    head = _exactly(4)
    body = None if head is None else _exactly(int.from_bytes(head, "little"))
    return None if body is None else marshal.loads(body)


def _reply(message: dict | str) -> None:
    data = (message if type(message) is str else dumps(message)).encode()  # noqa: F821
    data = len(data).to_bytes(4, "little") + data
    while data:
        data = data[_write(REPLIES, data) :]


def _failure(exc: BaseException) -> dict:
    try:
        return {"error": str(type(exc).__name__)}
    except BaseException:  # a class whose name is itself hostile
        return {"error": "?"}


def main() -> None:
    job = _receive()
    if job is None:
        return
    ns = {"__name__": "__solution__", "__builtins__": builtins}
    given = set(ns)
    try:
        exec(compile(job["program"], "<program>", "exec"), ns)
    except BaseException as exc:  # the program's own failure: every test fails
        _reply(_failure(exc))
        import traceback

        traceback.print_exc()
        return
    _reply({"defined": [n for n, v in ns.items() if n not in given and callable(v)]})
    while (call := _receive()) is not None:
        name, args, kwargs = call
        try:
            value = ns[name](*args, **kwargs)
            message = dumps({"v": encode(value)})  # noqa: F821 (plain.py's, prepended)
        except BaseException as exc:
            message = _failure(exc)
        _reply(message)


if __name__ == "__main__":
    main()
