"""Cases: the unit a graded test checks, a failure message names, and ``ol`` diagnoses.

A graded test is a list of :class:`Case` objects and one call to :func:`check`. A case is one call
into the learner's code (``run``), written out as Python a learner can paste into a REPL
(``call``), with what the card says it must give (``expected``) and the rule behind it (``rule``).
Its *answer* is ``run()`` made plain JSON (lists, numbers, strings), or ``{"raises": "TypeName"}``
when the call raised.

The same cases serve three readers: the test (``check`` compares each answer with ``expected`` and
fails with a message that names the case), ``ol diff`` (the learner's answers beside the
reference's), and ``ol check``'s diagnosis (the learner's answers beside each named pitfall's, on
the cases where they part from the reference's). A test module exposes its cases as functions
``cases_<test name>()`` next to ``test_<test name>()``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grader.core.protocol import ANSWERS_ENV, where_in_package  # ANSWERS_ENV: where check() leaves each test's answers

FLOAT_TOLERANCE = 1e-9
MESSAGE_LIMIT = 1800
CALL_LIMIT = 600
ANSWER_LIMIT = 400   # an answer's line; the message keeps room for where they part and the rule
CALL_CLIPPED = " ... (ol diff -k {test} shows the whole call)"
ANSWER_CLIPPED = " ... (ol diff -k {test} shows it whole)"

LAW_P_VALUE = 1e-4

Answer = Any
Judge = Callable[[Answer, Any], "str | None"]


class NotWritten(Exception):
    """The learner's function is still a stub (it raised NotImplementedError)."""


@dataclass
class Case:
    label: str                     # short and unique within the test: "periodic-003", "section 3"
    call: str                      # Python that reproduces the case, for people
    run: Callable[[], Any]         # calls the code under test; its result becomes the answer
    expected: Any = None           # what the card says the answer is
    rule: str = ""                 # "card 2.1: ..." -- the rule the expected answer follows
    judge: Judge | None = None     # answer, expected -> what is wrong, or None; default: equal
    compare: str = "exact"         # how two answers are alike: "exact" (floats to 1e-9) or "law"
    show: Callable[[Answer], str] | None = None   # an answer for people; default: repr

    def answer(self) -> Answer:
        """``run()`` as plain JSON; a raised exception becomes ``{"raises": name}``.

        A stub's NotImplementedError is not an answer: it propagates, so the test fails with the
        stub's own message ("spec.prompt_lookup (L10.8): not written yet ...").
        A returned value shaped like a raise is kept apart as ``{"returned": value}``: returning
        ``{"raises": "SpecError"}`` is not raising it.
        """
        try:
            answer = plain(self.run())
            return {RETURNED: answer} if is_raise(answer) else answer
        except NotImplementedError:
            raise
        except Exception as err:  # the learner's code raising is an answer like any other
            return {RAISES: type(err).__name__, "message": with_place(first_line(str(err)), err)}

    def problem(self, answer: Answer) -> str | None:
        """What is wrong with ``answer`` for this case, or None."""
        if self.judge is not None:
            return self.judge(answer, self.expected)
        if is_raise(self.expected):
            return judge_raises(answer, self.expected)
        if is_raise(answer):
            return f"it raised {answer[RAISES]} instead of answering"
        # the expected value as an answer arrives: a dict keyed by ints would part from its own answer
        parting = first_parting(plain(self.expected), answer)
        if parting is None:
            return None
        where, want, got = parting
        if where == "":
            return ""
        return f"they part at {where}: expected {brief(want)}, yours {brief(got)}"

    def alike(self, a: Answer, b: Answer) -> bool:
        """Two answers to this case are the same behaviour (for ``ol diff`` and the diagnosis)."""
        return alike(a, b, self.compare)

    def shown(self, answer: Answer) -> str:
        if is_raise(answer):
            return f"raises {answer[RAISES]}: {answer.get('message', '')}".rstrip(": ")
        return self.show(answer) if self.show is not None else brief(answer)


def each(function: Callable, calls: list[tuple]) -> list[Any]:
    """``[function(*args) for args in calls]``: in an isolated check, in one exchange with the process
    running the code under test rather than one per call (many calls of one function, as a
    statistical test makes; :func:`in_turn`)."""
    return in_turn([(function, args) for args in calls])


def keys_of(owner: Any, name: str) -> list:
    """``list(getattr(owner, name))``: the keys of a dict attribute, which :func:`in_turn` reads
    where the object lives, without sending the values (a server's growing ``results``)."""
    return list(getattr(owner, name))


def in_turn(calls: list[tuple[Callable, tuple]]) -> list[Any]:
    """``[function(*args) for function, args in calls]``, ``getattr`` and :func:`keys_of` among the
    functions to read an attribute (``(getattr, (server, "running"))``): in an isolated check, when
    every call goes into the code under test, in one exchange with its process rather than one per
    call (a test that steps a server hundreds of times and reads its state after each step)."""
    batch = [getattr(args[0] if function is getattr or function is keys_of else function, "_ol_in_turn", None)
             for function, args in calls]
    if batch and all(b is not None for b in batch):
        return batch[0](calls)
    return [function(*args) for function, args in calls]


def check(cases: list[Case], what: str = "case") -> list[Answer]:
    """Run every case; fail with a message naming the first failing one (and how many failed).

    Returns the answers, for a test that checks something across all of them. Under ``ol check``
    the answers are also written down, so the diagnosis compares them without running the code again.
    """
    failing: list[tuple[Case, Answer, str]] = []
    answers = []
    try:
        for case in cases:
            got = case.answer()
            answers.append(got)
            problem = case.problem(got)
            if problem is not None:
                failing.append((case, got, problem))
    finally:
        _record(cases, answers)
    if failing:
        raise AssertionError(failure_message(failing, len(cases), what, _current_test() or "TEST"))
    return answers


def _record(cases: list[Case], answers: list[Answer]) -> None:
    """Leave the answers where ``ol check`` asked (``OL_ANSWERS_DIR``), as the case worker writes them;
    a stub's NotImplementedError stops the list short, and then nothing is written."""
    folder = os.environ.get(ANSWERS_ENV)
    test = _current_test()
    if not folder or not test or len(answers) != len(cases):
        return
    entry = {"cases": [{"label": c.label, "call": c.call, "compare": c.compare, "answer": a}
                       for c, a in zip(cases, answers)]}
    try:
        tmp = Path(folder) / f".{test}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(entry))
        tmp.replace(Path(folder) / f"{test}.json")
    except (OSError, TypeError, ValueError):
        pass  # the diagnosis then computes the answers itself


def plural(noun: str) -> str:
    """``case`` -> ``cases``, ``batch`` -> ``batches``."""
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


def _current_test() -> str:
    """The running test's catalog name (the pytest function without ``test_``), or ""."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[-1].split(" ")[0].removeprefix("test_")


def failure_message(failing: list[tuple[Case, Answer, str]], total: int, what: str = "case",
                    test: str = "TEST") -> str:
    """The headline (which case, how many), then the case: call, expected, yours, where, rule;
    what is clipped names ``test`` for ``ol diff -k``."""
    case, got, problem = failing[0]
    if total > 1:
        head = f"{what} {case.label!r}: {len(failing)} of {total} {plural(what)} fail; the first:"
    else:
        head = f"{what} {case.label!r} fails:"
    lines = [head, f"  call:     {clip(case.call, test=test)}"]
    if case.expected is not None:
        lines.append(f"  expected: {clip(case.shown(case.expected), ANSWER_LIMIT, ANSWER_CLIPPED, test)}")
    lines.append(f"  yours:    {clip(case.shown(in_order_of(got, case.expected)), ANSWER_LIMIT, ANSWER_CLIPPED, test)}")
    if problem:
        lines.append(f"  {problem}")
    if case.rule:
        lines.append(f"  rule:     {case.rule}")
    text = "\n".join(lines)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 3] + "..."


def clip(text: str, width: int = CALL_LIMIT, what: str = CALL_CLIPPED, test: str = "TEST") -> str:
    """A call or an answer too long to read in a terminal (big arrays): its start, and where to see
    it whole (``what``, naming ``test``)."""
    return text if len(text) <= width else text[:width] + what.format(test=test)


def in_order_of(answer: Answer, like: Any) -> Answer:
    """``answer`` with its keys in ``like``'s order, so two dicts read side by side."""
    if isinstance(answer, dict) and isinstance(like, dict):
        return {**{k: answer[k] for k in like if k in answer}, **answer}
    return answer


def alike(a: Answer, b: Answer, compare: str = "exact") -> bool:
    """Two answers to one case are the same behaviour, as a learner sees it.

    ``exact``: equal, floats within 1e-9; two raised exceptions are alike when their types and their
    messages are (:func:`message_shape`). ``law``: two count vectors (how often each id was drawn
    over the same seeds) that a chi-square test of homogeneity cannot tell apart at p = 1e-4.
    """
    if is_raise(a) or is_raise(b):
        return (is_raise(a) and is_raise(b) and a[RAISES] == b[RAISES]
                and message_shape(a.get("message", "")) == message_shape(b.get("message", "")))
    if compare == "law":
        return same_law(a, b)
    return first_difference(a, b) is None


def graded_alike(answer: Answer, reference: Answer, compare: str = "exact") -> bool:
    """The graded tests cannot tell ``answer`` from ``reference``: :func:`alike`, or the same
    exception in other words (a refusal is checked by its type, :func:`judge_raises`)."""
    return alike(answer, reference, compare) or (is_raise(reference) and judge_raises(answer, reference) is None)


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_WHERE = re.compile(r" \([^()]*\.py, line \d+\)$")   # where an isolated check's learner process raised
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int|uint|bool_?)\d*\(([^()]*)\)")
_FLOAT = re.compile(r"-?\d+\.\d*(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")


def message_shape(message: str) -> str:
    """An exception's message without what only says where it was raised or how a value was held:
    the file and line an isolated check appends, object addresses, numpy's scalar wrappers
    (``np.float64(0.5)`` is ``0.5``) and float digits past the sixth significant one. Integers stay:
    they are counts and positions, part of the behaviour."""
    text = _NUMPY_SCALAR.sub(r"\1", _ADDRESS.sub("0x?", without_place(message)))
    return _FLOAT.sub(lambda m: f"{float(m.group()):.6g}", text)


def telling(reference: Answer, learner: Answer, compare: str = "exact") -> bool:
    """Whether two differing answers part in more than true/false values: a difference that only
    flips booleans ("the cache holds the text": False) says that something is wrong, not what."""
    if compare != "exact" or is_raise(reference) or is_raise(learner):
        return True
    return not _bools_only(reference, learner)


def _bools_only(want: Any, got: Any) -> bool:
    if isinstance(want, dict) and isinstance(got, dict):
        return set(want) == set(got) and all(_bools_only(want[k], got[k]) for k in want)
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(want) == len(got) and all(_bools_only(a, b) for a, b in zip(want, got))
    if isinstance(want, bool) and isinstance(got, bool):
        return True
    return first_difference(want, got) is None


def same_law(a: Answer, b: Answer) -> bool:
    """Two count vectors a chi-square test of homogeneity cannot tell apart at p = 1e-4 (the test
    ``scipy.stats.chi2_contingency`` makes, Yates' correction at one degree of freedom included),
    written out in plain Python: importing scipy cost every failing check a second."""
    if not (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)):
        return first_difference(a, b) is None
    try:
        pairs = [(float(x), float(y)) for x, y in zip(a, b)]
    except (TypeError, ValueError):
        return first_difference(a, b) is None
    if not all(0 <= x < math.inf and 0 <= y < math.inf for x, y in pairs):  # counts, or no law to test
        return first_difference(a, b) is None
    columns = [(x, y) for x, y in pairs if x + y > 0]
    if len(columns) < 2 or all(x == y for x, y in columns):
        return all(x == y for x, y in columns)
    rows = [sum(x for x, _ in columns), sum(y for _, y in columns)]
    if min(rows) == 0:  # one side drew nothing the other did
        return False
    total = rows[0] + rows[1]
    dof = len(columns) - 1
    statistic = 0.0
    for column in columns:
        for observed, row in zip(column, rows):
            expected = row * sum(column) / total
            gap = abs(expected - observed)
            if dof == 1:
                gap -= min(0.5, gap)
            statistic += gap * gap / expected
    return chi2_survival(statistic, dof) > LAW_P_VALUE


def chi2_survival(x: float, dof: int) -> float:
    """P(X > x) for X chi-square with ``dof`` degrees of freedom: the regularized upper incomplete
    gamma function Q(dof / 2, x / 2), summed in closed form for a whole or half-whole shape."""
    h = x / 2
    if dof % 2 == 0:
        term = total = math.exp(-h)
        for i in range(1, dof // 2):
            term *= h / i
            total += term
        return total
    total = math.erfc(math.sqrt(h))
    term = math.exp(-h) * math.sqrt(h) / math.gamma(1.5)
    for i in range(1, (dof - 1) // 2 + 1):
        total += term
        term *= h / (i + 0.5)
    return total


def chi2_quantile(dof: int, p: float) -> float:
    """The ``x`` with ``P(X > x) = p`` for X chi-square with ``dof`` degrees of freedom (scipy's
    ``chdtri``), by bisection on :func:`chi2_survival`: the graded suites' chi-square thresholds,
    without importing scipy in every check."""
    low, high = 0.0, 1.0
    while chi2_survival(high, dof) > p:
        low, high = high, 2 * high
    while high - low > 1e-12 * high:
        mid = (low + high) / 2
        if chi2_survival(mid, dof) > p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def plain(value: Any) -> Any:
    """A result as JSON-able data: numpy scalars and arrays, tuples, enums and dataclasses unwrapped."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):   # numpy arrays and scalars
        return plain(value.tolist())
    return repr(value)


def first_difference(want: Any, got: Any) -> str | None:
    """Where ``got`` first parts from ``want`` ("tokens[2]", "" for the whole value), or None.

    Floats are equal within 1e-9; a bool is never equal to a number; ints and floats that are
    equal in value are equal.
    """
    parting = first_parting(want, got)
    return None if parting is None else parting[0]


def first_parting(want: Any, got: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """:func:`first_difference`'s place, with the two values found there (``_MISSING`` for a key or
    an item one side lacks): a long answer is clipped where it is shown, its difference may not be."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in want:
            parting = first_parting(want[key], got.get(key, _MISSING), f"{path}.{key}" if path else key)
            if parting is not None:
                return parting
        extra = [k for k in got if k not in want]
        return (f"{path}.{extra[0]}" if path else extra[0], _MISSING, got[extra[0]]) if extra else None
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        for i, (a, b) in enumerate(zip(want, got)):
            parting = first_parting(a, b, f"{path}[{i}]")
            if parting is not None:
                return parting
        if len(want) == len(got):
            return None
        n = min(len(want), len(got))
        return (f"{path}[{n}] (lengths {len(want)} and {len(got)})",
                want[n] if n < len(want) else _MISSING, got[n] if n < len(got) else _MISSING)
    if isinstance(want, bool) or isinstance(got, bool):
        same = want is got
    elif isinstance(want, (int, float)) and isinstance(got, (int, float)):
        if isinstance(want, float) or isinstance(got, float):
            same = (math.isnan(want) and math.isnan(got)) or math.isclose(want, got, rel_tol=0, abs_tol=FLOAT_TOLERANCE)
        else:
            same = want == got
    else:
        same = want == got
    return None if same else (path, want, got)


class _Missing:
    def __repr__(self) -> str:
        return "(missing)"


_MISSING = _Missing()


def brief(value: Any, limit: int = 16) -> str:
    """An answer in one line: long lists keep their two ends; floats to 6 significant digits."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {brief(v, limit)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        items = [brief(v, limit) for v in value]
        if len(items) > limit:
            half = limit // 2
            return f"[{', '.join(items[:half])}, ..., {', '.join(items[-half:])}] ({len(items)} items)"
        return f"[{', '.join(items)}]"
    if isinstance(value, float):
        text = f"{value:.10g}"
        return text if any(c in text for c in ".eni") else text + ".0"
    return repr(value)


def with_place(message: str, err: BaseException) -> str:
    """``message`` and where the package under test raised ``err`` ("(tinyllm/serve.py, line 289)"),
    as an isolated check's learner process reports it, unless the message says so already. Raised
    in a test's own code, it is the test's line: reading what the learner's code returned (a tuple
    where the card says ``Verified``), the test raised, not the learner's code."""
    where = where_in_package(err.__traceback__) or _in_tests(err.__traceback__)
    if where is None or _WHERE.search(message):
        return message
    return f"{message} ({where})" if message else f"({where})"


def _in_tests(tb) -> str | None:
    """``in the test's code, on what yours gave it: course/tests/test_l10_8.py, line 380`` for the
    innermost frame of a traceback in the graded suites' folder, if any."""
    where = None
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/course/tests/" in path:
            where = (f"in the test's code, on what yours gave it: course/tests/{path.rsplit('/course/tests/', 1)[1]}, "
                     f"line {tb.tb_lineno}")
        tb = tb.tb_next
    return where


def answer_text(answer: Answer, limit: int = 16, reference: bool = False) -> str:
    """An answer in one line (:func:`brief`); a raised exception as ``raises Type: message``, the
    reference's without where it raised (:func:`without_place`)."""
    if not is_raise(answer):
        return brief(answer, limit)
    message = answer.get("message", "")
    return f"raises {answer[RAISES]}: {without_place(message) if reference else message}"


def without_place(message: str) -> str:
    """An exception's message without the place :func:`with_place` added: where the reference
    raised means nothing to a learner."""
    return _WHERE.sub("", message)


def first_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0][:200] if lines else ""


def py(value: Any) -> str:
    """``value`` as Python source a learner can paste: numpy arrays keep their dtype, floats all digits."""
    if hasattr(value, "dtype") and hasattr(value, "tolist") and getattr(value, "ndim", 0) >= 1:
        return f"np.array({value.tolist()!r}, dtype=np.{value.dtype})"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(py(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = [f"{f.name}={py(getattr(value, f.name))}" for f in dataclasses.fields(value)
                   if f.default is dataclasses.MISSING or getattr(value, f.name) != f.default]
        return f"{type(value).__name__}({', '.join(changed)})"
    return repr(value)


def call_text(function: str, *args: Any, **kwargs: Any) -> str:
    """``function(args...)`` as pasteable Python."""
    parts = [py(a) for a in args] + [f"{k}={py(v)}" for k, v in kwargs.items()]
    return f"{function}({', '.join(parts)})"


def call(label: str, function: Callable, *args: Any, expected: Any = None, rule: str = "",
         name: str | None = None, **fields: Any) -> Case:
    """A case that calls ``function(*args)``; its ``call`` text is that call, written out."""
    return Case(label, call_text(name or function.__name__, *args), lambda: function(*args), expected, rule, **fields)


RAISES = "raises"
RETURNED = "returned"


def is_raise(answer: Answer) -> bool:
    """The answer of a call that raised (``{"raises": name, "message": ...}``, both strings)."""
    return (isinstance(answer, dict) and isinstance(answer.get(RAISES), str) and set(answer) <= {RAISES, "message"}
            and isinstance(answer.get("message", ""), str))


def raises(kind: str) -> dict:
    """The expected answer of a call that must raise ``kind`` (by name: "SpecError")."""
    return {RAISES: kind}


def judge_raises(answer: Answer, expected: dict) -> str | None:
    """Expected ``raises(kind)``: the call raised ``kind`` (or a subclass, named in ``kinds``)."""
    if is_raise(answer) and answer[RAISES] == expected[RAISES]:
        return None
    if is_raise(answer):
        return f"it raised {answer[RAISES]}, not {expected[RAISES]}"
    return f"it returned instead of raising {expected[RAISES]}"
