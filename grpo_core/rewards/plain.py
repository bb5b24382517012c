"""Plain data: the only values that cross between a sandboxed program and its tests.

A tagged JSON encoding of exact builtin types: None, bool, int, float (NaN and infinities
included), str, and tagged list, tuple, set, frozenset, dict, bytes and complex. Anything else,
a subclass included (an object with a forged `__eq__`), cannot be encoded.

This file is imported by the parent as a module, and its source is also prepended to the two
halves of the code reward's harness (`code_runner.py` in the sandbox, `code_tester.py` in its
supervisor), which run without `grpo_core` on their path. So it imports nothing but C modules:
the `json` package would import `re`, doubling the start-up time of every sandboxed program.
"""

import _json

_INF = float("inf")
_quote = _json.encode_basestring_ascii
_CONTAINERS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
_CONSTANTS = {"NaN": float("nan"), "Infinity": _INF, "-Infinity": -_INF}


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
    raise TypeError(f"not plain data: {t.__name__}")


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


def dumps(x: object) -> str:
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
        return "[" + ",".join([dumps(v) for v in x]) + "]"
    if t is dict:
        return "{" + ",".join([_quote(k) + ":" + dumps(v) for k, v in x.items()]) + "}"
    raise TypeError(f"cannot write {t.__name__}")


class _ScannerContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


_scan = _json.make_scanner(_ScannerContext())


def loads(text: str) -> object:
    """The JSON value that is the whole of `text` (NaN and Infinity allowed); ValueError else."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if text[end:].strip():
        raise ValueError("trailing data")
    return value
