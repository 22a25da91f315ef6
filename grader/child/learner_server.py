"""Entry point of the learner's process in an isolated check (copied beside the learner's package as
``ol_learner_server.py`` and run as a script): their ``tinyllm`` package, served over RPyC to the judge.

    python -B learner_server.py        (OL_IMPL: the folder holding tinyllm/, OL_RPC_FD: the socket)

In an isolated check (:mod:`grader.child.judge`) the graded suite runs in the judge, a process the
learner's code never enters; each call the suite makes into ``tinyllm.<learner file>`` is sent
here, run, and its result sent back as data. This file is the only code of ol that shares a
process with the learner's, and it decides nothing: it imports what the judge names, calls it,
and encodes the result. It needs only the standard library, numpy and rpyc (it is copied beside
the learner's package, so the sandbox's user needs no access to ol's own files).

What crosses, and how:

- judge to learner: a pickle (the judge is trusted). Values travel by value; the judge's objects
  that the learner's package cannot import (the suite's fake targets, callbacks) travel as
  references, and using one here calls back into the judge. Lists, dicts, arrays and objects of
  ``tinyllm`` classes passed as arguments come back after the call when it changed them (their
  final contents), so the judge sees what the learner's code did to them.
- learner to judge: JSON with a few tagged forms (tuples, arrays, enum members, dataclass fields,
  references to objects that stay here). Never a pickle: the judge decodes data, and runs nothing
  the learner chose.
"""

from __future__ import annotations

import base64
import builtins
import dataclasses
import enum
import functools
import importlib
import io
import json
import os
import pickle
import socket
import sys
import traceback

import numpy as np
import rpyc
from rpyc.core.stream import SocketStream

from grader.core.protocol import IMPL_ENV, RPC_FD_ENV, where_in_package

MESSAGE_LIMIT = 2000
# rpyc's options for a peer that is not trusted: no attribute access, no pickles, no custom
# exceptions built from the wire; only the ``exposed_`` methods of each side's service.
RPC_CONFIG = {
    "allow_safe_attrs": False, "log_exceptions": False, "allow_public_attrs": False, "allow_all_attrs": False, "allow_setattr": False, "allow_delattr": False,
    "allow_pickle": False, "import_custom_exceptions": False, "instantiate_custom_exceptions": False,
    "instantiate_oldstyle_exceptions": False, "include_local_traceback": False, "include_local_version": False,
    "propagate_SystemExit_locally": False, "propagate_KeyboardInterrupt_locally": False,
    "sync_request_timeout": None,
}
NUMERIC_KINDS = "biufc"
# Values that are their own JSON form: lists of them are sent and snapshot without a call per item.
SCALARS = frozenset((int, float, bool, str, type(None)))
BUILTIN_ERRORS = {name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, Exception)}


# --- what travels learner -> judge: tagged JSON -------------------------------------------------

class Objects:
    """Objects that stay here, known to the judge by number (the same object, the same number)."""

    def __init__(self) -> None:
        self.by_number: dict[int, object] = {}
        self.numbers: dict[int, int] = {}

    def number(self, obj: object) -> int:
        key = id(obj)
        if key not in self.numbers:
            n = len(self.by_number) + 1
            self.by_number[n] = obj
            self.numbers[key] = n
        return self.numbers[key]


OBJECTS = Objects()


def encode(value, depth: int = 0):
    """``value`` as JSON data with tags: ``$t`` tuple, ``$d`` dict, ``$a`` array, ``$s`` numpy scalar,
    ``$e`` enum member, ``$c`` dataclass instance, ``$j`` a judge's object, ``$h`` an object kept here."""
    if depth > 200:
        raise ValueError("the value is nested too deeply to send")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and not isinstance(value, enum.Enum):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, JudgeRef):
        return {"$j": value._ol_ref}
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {"$e": [cls.__module__, cls.__qualname__, value.name]}
    if isinstance(value, np.ndarray) and value.dtype.kind in NUMERIC_KINDS:
        data = np.ascontiguousarray(value)
        return {"$a": data.dtype.str, "shape": list(value.shape), "data": base64.b64encode(data.tobytes()).decode()}
    if isinstance(value, np.generic) and value.dtype.kind in NUMERIC_KINDS:
        return {"$s": value.dtype.str, "v": value.item() if value.dtype.kind != "c" else [value.real, value.imag]}
    if isinstance(value, list):
        if SCALARS.issuperset(map(type, value)):
            return list(value)
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return {"$t": [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict) and type(value) is dict:
        return {"$d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"$c": [cls.__module__, cls.__qualname__],
                "f": {f.name: encode(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}}
    cls = type(value)
    return {"$h": OBJECTS.number(value), "type": [getattr(cls, "__module__", ""), getattr(cls, "__qualname__", "")]}


def encode_error(err: BaseException) -> dict:
    """A raised exception: its class (module, name, the builtin it derives from) and message."""
    cls = type(err)
    base = builtin_base(cls)
    message = " ".join(str(err).split("\n")[:1]) if str(err).strip() else ""
    where = where_in_package(err.__traceback__)
    if where and not isinstance(err, AssertionError):
        message = f"{message} ({where})" if message else f"({where})"
    return {"$raise": [cls.__module__, cls.__qualname__, base, message[:MESSAGE_LIMIT]]}


def builtin_base(cls: type) -> str:
    """The nearest builtin exception class ``cls`` derives from, by name."""
    return next((c.__name__ for c in cls.__mro__ if c.__module__ == "builtins" and c.__name__ in BUILTIN_ERRORS),
                "Exception")


# --- what travels judge -> learner: a pickle, with references to the judge's objects ---------------

class JudgeRef:
    """One of the judge's objects (a fake target, a callback): attributes and calls go to the judge."""

    def __init__(self, ref: int, kind: str = "") -> None:
        object.__setattr__(self, "_ol_ref", ref)
        object.__setattr__(self, "_ol_kind", kind)
        object.__setattr__(self, "_ol_methods", {})

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._ol_methods:
            return self._ol_methods[name]
        if name not in _CLASS_METHODS.get(self._ol_kind, ()):
            reply = _callback(self._ol_ref, "getattr", [name])
            if not isinstance(reply, _Method):
                return reply
            if reply.of_class and self._ol_kind:
                _CLASS_METHODS.setdefault(self._ol_kind, set()).add(name)
        method = _Bound(self._ol_ref, name)
        self._ol_methods[name] = method
        return method

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"the judge's objects cannot be changed from the code under test (setting {name!r})")

    def __call__(self, *args, **kwargs):
        return _callback(self._ol_ref, "call", [None, list(args), kwargs])

    def __repr__(self) -> str:
        return _callback(self._ol_ref, "repr", [])


class _Bound:
    def __init__(self, ref: int, name: str) -> None:
        self.ref, self.name = ref, name

    def __call__(self, *args, **kwargs):
        return _callback(self.ref, "call", [self.name, list(args), kwargs])


class _Method:
    """The judge's answer to getattr when the attribute is a method (``of_class``: defined by the
    object's class, so a method of every object of that class)."""

    def __init__(self, of_class: bool) -> None:
        self.of_class = of_class


# The judge's classes (by the name the judge gave them) and the methods they define: an object of
# a class met before needs no lookup for those.
_CLASS_METHODS: dict[str, set[str]] = {}


class _JudgeError(Exception):
    pass


_CONNECTION = None
_JUDGE_CALLBACK = None


def _callback(ref: int, op: str, args: list):
    global _JUDGE_CALLBACK
    if _JUDGE_CALLBACK is None:
        _JUDGE_CALLBACK = _CONNECTION.root.callback
    reply = _JUDGE_CALLBACK(ref, op, json.dumps(encode(args)))
    if type(reply) is not bytes:
        raise _JudgeError("the judge's reply is not data")
    status, *rest = _load(reply)
    if status == "ok":
        return rest[0]
    if status == "method":
        return _Method(bool(rest and rest[0]))
    module, qualname, base, message = rest
    raise _exception_class(module, qualname, base)(message)


def _exception_class(module: str, qualname: str, base: str) -> type:
    """The learner's own class for an exception the judge raised when it can be found, else a look-alike."""
    try:
        found = resolve(module, qualname)
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
    except Exception:
        pass
    builtin = getattr(builtins, base) if base in BUILTIN_ERRORS else Exception
    return type(qualname.rsplit(".", 1)[-1], (builtin,), {"__module__": module})


def rebuild(module: str, qualname: str, fields: dict):
    """A dataclass instance the judge holds a copy of, rebuilt from its fields without running ``__init__``."""
    cls = resolve(module, qualname)
    obj = cls.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(obj, name, value)
    return obj


def kept(number: int):
    """An object kept here, which the judge passes back by its number."""
    return OBJECTS.by_number[number]


def resolve(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# One stand-in per judge's object (the judge numbers each object once), so the methods it looked up
# stay known from one call to the next.
_JUDGE_REFS: dict[int, JudgeRef] = {}


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        kind, ref, of_class = pid
        if kind != "j":
            raise pickle.UnpicklingError(f"unknown reference {kind!r}")
        if ref not in _JUDGE_REFS:
            _JUDGE_REFS[ref] = JudgeRef(ref, of_class)
        return _JUDGE_REFS[ref]

    def find_class(self, module: str, name: str):
        if module in ("grader.child.learner_server", "__main__"):
            return {"rebuild": rebuild, "kept": kept, "resolve": resolve}[name]
        return super().find_class(module, name)


def _load(data: bytes):
    return _Unpickler(io.BytesIO(data)).load()


# --- the service ----------------------------------------------------------------------------------

def describe(module_name: str) -> list[dict]:
    """The names of a learner module, each with what the judge needs to stand in for it."""
    module = importlib.import_module(module_name)
    package = module_name.split(".")[0]
    entries = []
    for name, value in vars(module).items():
        if name.startswith("__") or type(value).__name__ == "module":
            continue
        origin = getattr(value, "__module__", None) or ""
        where = [origin, getattr(value, "__qualname__", name)]
        if not isinstance(value, type) and callable(value):
            # Found again by this module's attribute: a decorated function's or a lambda's
            # ``__qualname__`` does not lead back to it.
            where = [module_name, name]
            if isinstance(value, functools.partial):    # its __module__ is functools'
                origin = package
        if isinstance(value, type):
            if not origin.startswith(package):
                continue
            if issubclass(value, enum.Enum):
                entries.append({"name": name, "kind": "enum", "path": where,
                                "members": [[m.name, encode(m.value)] for m in value]})
            elif issubclass(value, BaseException):
                entries.append({"name": name, "kind": "exception", "path": where,
                                "base": builtin_base(value)})
            elif dataclasses.is_dataclass(value):
                entries.append({"name": name, "kind": "dataclass", "path": where,
                                "fields": [f.name for f in dataclasses.fields(value)]})
            else:
                entries.append({"name": name, "kind": "class", "path": where})
        elif callable(value) and origin.startswith(package):
            entries.append({"name": name, "kind": "function", "path": where})
        elif isinstance(value, (bool, int, float, str, tuple, list, dict)) and not callable(value):
            try:
                entries.append({"name": name, "kind": "value", "value": encode(value)})
            except ValueError:
                continue
    return entries


def _target(spec):
    kind = spec[0]
    if kind == "path":
        return resolve(spec[1], spec[2])
    if kind == "kept":
        return OBJECTS.by_number[spec[1]]
    return spec[1]     # "value": an object the judge sent by value


def _invoke(op: str, spec, args: list, kwargs: dict):
    target = _target(spec)
    if op == "call":
        return target(*args, **kwargs)
    if op == "getattr":
        return getattr(target, args[0])
    if op == "keys":        # a dict attribute's keys, without its values (grader.cases.keys_of)
        return list(getattr(target, args[0]))
    if op == "len":
        return len(target)
    if op == "iter":
        return list(target)
    if op == "getitem":
        return target[args[0]]
    if op == "setitem":     # the judge wrote into an array attribute it read: ``pool.k[1, 2, 3] = 1.0``
        getattr(target, args[0])[args[1]] = args[2]
        return None
    if op == "contains":
        return args[0] in target
    if op == "bool":
        return bool(target)
    if op == "repr":
        return repr(target)
    raise ValueError(f"unknown operation {op!r}")


def _before(args: list, kwargs: dict) -> dict:
    """What the mutable arguments hold before a call, to send back only those it changed."""
    return {key: _snapshot(value) for key, value in [*enumerate(args), *kwargs.items()] if _mutable(value)}


def _mutable(value) -> bool:
    if isinstance(value, (list, dict, np.ndarray)):
        return True
    return (not isinstance(value, type) and (getattr(type(value), "__module__", "") or "").startswith("tinyllm")
            and not dataclasses.is_dataclass(value) and not isinstance(value, enum.Enum) and hasattr(value, "__dict__"))


def _flat(items) -> tuple | None:
    """``items`` with their types when every one is a plain scalar (compared by value, not identity),
    else None: the common case (lists of ids, counts, fills), snapshot without a call per item."""
    items = tuple(items)
    types_ = tuple(map(type, items))
    return (items, types_) if SCALARS.issuperset(types_) else None


def _snapshot(value, depth: int = 0) -> tuple:
    """``value``'s contents: arrays by their bytes, lists, dicts and ``tinyllm`` objects by their
    items', anything else (immutable) as the object itself, held so its identity stays its own."""
    if isinstance(value, np.ndarray):
        return ("a", value.shape, value.dtype.str, value.tobytes())
    if type(value) is list:
        flat = _flat(value)
        if flat is not None:
            return ("s", flat)
    if depth <= 4 and isinstance(value, list):
        return ("l", [_snapshot(v, depth + 1) for v in value])
    if depth <= 4 and (isinstance(value, dict) or _mutable(value)):
        items = value if isinstance(value, dict) else vars(value)
        flat = _flat(items.values())
        if flat is not None:
            return ("s", (tuple(items), *flat))
        return ("d", [(k, _snapshot(v, depth + 1)) for k, v in items.items()])
    return ("o", value)


def _unchanged(a: tuple, b: tuple) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "o":
        return a[1] is b[1]
    if a[0] in "as":
        return a[1:] == b[1:]
    if len(a[1]) != len(b[1]):
        return False
    if a[0] == "l":
        return all(_unchanged(x, y) for x, y in zip(a[1], b[1]))
    return all(k == j and _unchanged(x, y) for (k, x), (j, y) in zip(a[1], b[1]))


def _after(args: list, kwargs: dict, before: dict) -> list:
    """The final contents of the mutable arguments the call changed, for the judge to copy back."""
    out = []
    for key, value in [*enumerate(args), *kwargs.items()]:
        if key not in before or _unchanged(before[key], _snapshot(value)):
            continue
        if isinstance(value, (list, dict, np.ndarray)):
            out.append([key, encode(value)])
        else:
            out.append([key, {"$state": encode(dict(vars(value)))}])
    return out


class LearnerService(rpyc.Service):
    def exposed_describe(self, module_name: str) -> str:
        try:
            return json.dumps({"ok": describe(str(module_name))})
        except BaseException as err:  # the learner's module failed to import: the judge says so
            if isinstance(err, SystemExit):
                err = RuntimeError(f"SystemExit({err.code!r}) while importing {module_name}")
            return json.dumps({"raise": encode_error(err)["$raise"]})

    def exposed_invoke(self, payload: bytes) -> str:
        try:
            op, spec, args, kwargs = _load(bytes(payload))
            if op == "in_turn":
                return json.dumps(_in_turn(args))
            before = _before(args, kwargs) if op == "call" else {}
        except BaseException as err:
            return json.dumps({"raise": _raised(err)})
        try:
            result = _invoke(op, spec, args, kwargs)
            return json.dumps({"ok": encode(result), "after": _after(args, kwargs, before)})
        except BaseException as err:  # the learner's code raising is an answer like any other
            # what it changed before it raised stays changed, as it does in process
            return json.dumps({"raise": _raised(err), "after": _after_anyway(args, kwargs, before)})


def _after_anyway(args: list, kwargs: dict, before: dict) -> list:
    """:func:`_after` for a call that raised: an argument left in a state that cannot be sent is
    not sent (the raise is the answer)."""
    try:
        return _after(args, kwargs, before)
    except Exception:
        return []


def _raised(err: BaseException) -> list:
    if isinstance(err, SystemExit):
        err = RuntimeError(f"the code under test called sys.exit({err.code!r})")
    elif not isinstance(err, Exception):
        err = RuntimeError(f"the code under test raised {type(err).__name__}")
    return encode_error(err)["$raise"]


def _in_turn(requests: list) -> dict:
    """Each ``(op, spec, args, kwargs)`` of ``requests`` in order, as the judge would send them one
    by one: each result encoded as it comes (a later call does not change what an earlier read
    saw), the changed arguments of each call, and the first exception (which ends the turn)."""
    results, after = [], []
    for i, (op, spec, args, kwargs) in enumerate(requests):
        before = _before(args, kwargs) if op == "call" else {}
        try:
            results.append(encode(_invoke(op, spec, args, kwargs)))
        except BaseException as err:
            after.append([i, _after_anyway(args, kwargs, before)])
            return {"raise": _raised(err), "after": after}
        after.append([i, _after(args, kwargs, before)])
    return {"ok": results, "after": after}


def main() -> int:
    global _CONNECTION
    impl = os.environ.pop(IMPL_ENV)
    fd = int(os.environ.pop(RPC_FD_ENV))
    sys.path.insert(0, impl)
    sock = socket.socket(fileno=fd)
    _CONNECTION = conn = rpyc.connect_stream(SocketStream(sock), service=LearnerService, config=RPC_CONFIG)
    try:
        conn.serve_all()
    except Exception:
        traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.modules.setdefault("grader.child.learner_server", sys.modules[__name__])
    sys.exit(main())
