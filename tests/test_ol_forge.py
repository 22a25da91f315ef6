"""A verdict the code under test cannot forge: isolated checks (``ol check --isolate``, ``ol grade``).

Every hostile submission here is the stub ``spec.py`` (nothing written, so no test may pass) with an
attack added: a single passing test is a forged verdict.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from ol_helpers import ROOT, daemons_left, ol

pytestmark = pytest.mark.usefixtures("sandboxed")  # every test here grades: bubblewrap

STUB = (ROOT / "course" / "stubs" / "L10.8" / "spec.py").read_text()
MARKER = "ol-forge-test-daemon-41c9"

# The attack of issue 14: the recorder's own _send, forged records for every test, then a clean exit.
FORGE_RECORDS = '''
import os, sys
_recorder = sys.modules.get("grader.child.recorder")
if _recorder is not None and _recorder._fd >= 0:
    import re
    _suite = [m for m in sys.modules.values() if getattr(m, "__file__", "") and m.__file__.endswith("test_l10_8.py")]
    _names = re.findall(r"^def (test_\\w+)", open("{suite}").read(), re.M)
    _ids = [f"test_l10_8.py::{{n}}" for n in _names]
    _recorder._send({{"event": "collected", "tests": _ids}})
    for _node in _ids:
        _recorder._send({{"event": "start", "id": _node}})
        _recorder._send({{"event": "result", "id": _node, "outcome": "pass", "message": None, "duration": 0.01}})
    _recorder._send({{"event": "end", "exitstatus": 0, "tampered": None}})
    os._exit(0)
'''.format(suite=ROOT / "course" / "tests" / "test_l10_8.py")

# The pipe and nonce from the parent's /proc entries (environ keeps the initial environment).
PROC_PARENT = '''
import os, json
for _pid in (os.getppid(), os.getpgrp()):
    try:
        _env = dict(kv.split("=", 1) for kv in open(f"/proc/{_pid}/environ").read().split("\\0") if "=" in kv)
        _fd = os.open(f"/proc/{_pid}/fd/{_env['OL_REPORT_FD']}", os.O_WRONLY)
        for _event in ({"event": "collected", "tests": []}, {"event": "end", "exitstatus": 0}):
            os.write(_fd, (json.dumps({"nonce": _env["OL_REPORT_NONCE"], **_event}) + "\\n").encode())
    except Exception:
        pass
os._exit(0)
'''

ALWAYS_EQUAL = '''
class _Anything(list):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False


class _AnyDict(dict):
    def __eq__(self, other):
        return True
    def __getitem__(self, key):
        return _Anything()
    def get(self, key, default=None):
        return _Anything()


def prompt_lookup(*args, **kwargs):
    return _Anything()


def ngram_draft(*args, **kwargs):
    return _Anything()


def verify_draft(*args, **kwargs):
    return _AnyDict()
'''

PATCH_MACHINERY = '''
import sys
sys.path.insert(0, "{root}")
try:
    import grader.cases, _pytest.runner, _pytest.python
    grader.cases.Case.problem = lambda self, answer: None
    grader.cases.check = lambda cases, what="case": []
    _pytest.python.pytest_pyfunc_call = lambda pyfuncitem: True
except Exception:
    pass
'''.format(root=ROOT)

HOSTILE = {
    "forge_records": FORGE_RECORDS,
    "proc_parent": PROC_PARENT,
    "sys_exit": "import sys\nsys.exit(0)\n",
    "os_exit_print": "print('20 of 20 tests passed')\nimport os\nos._exit(0)\n",
    "patch_machinery": PATCH_MACHINERY,
    "flood": "import sys\nsys.stdout.write('PASSED ' * (2 << 20))\nsys.stderr.write('x' * (10 << 20))\n",
    "daemon": ("import subprocess, sys\n"
               f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # {MARKER}'],"
               " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"),
    "kill_parent": "import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n    pass\n",
}
# Appended after the stub's definitions: they replace its functions.
HOSTILE_SUFFIX = {
    "always_equal": ALWAYS_EQUAL,
    "python_loop": "\n\ndef prompt_lookup(*args, **kwargs):\n    while True:\n        pass\n",
    "c_loop": ("\n\ndef prompt_lookup(*args, **kwargs):\n    import ctypes, signal\n"
               "    for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):\n        signal.signal(s, signal.SIG_IGN)\n"
               "    ctypes.CDLL(None).sleep(3600)\n"),
    "exit_in_call": "\n\ndef prompt_lookup(*args, **kwargs):\n    import os\n    os._exit(0)\n",
}


def workspace(root: Path, name: str, text: str) -> Path:
    (root / name / "tinyllm").mkdir(parents=True)
    (root / name / "tinyllm" / "spec.py").write_text(text)
    return root / name


def test_forged_records_do_not_pass_an_isolated_check(tmp_path):
    ws = workspace(tmp_path, "forger", FORGE_RECORDS + STUB)
    ran = ol("check", "L10.8", "--ref-deps", "--isolate", workspace=ws, limit=120)
    assert ran.code == 1, ran.text
    assert "0 of 20 tests passed" in ran.out, ran.out


def test_hostile_battery_gets_no_point(tmp_path):
    subs = [workspace(tmp_path / "subs", name, attack + STUB) for name, attack in HOSTILE.items()]
    subs += [workspace(tmp_path / "subs", name, STUB + attack) for name, attack in HOSTILE_SUFFIX.items()]
    out = tmp_path / "out"
    ran = ol("grade", "L10.8", *map(str, subs), "--jobs", "2", "--out", str(out), "--timeout", "2",
             "--limit", "20", limit=300)
    assert ran.code == 0, ran.text
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert [r["submission"] for r in rows] == [s.name for s in subs]
    forged = [(r["submission"], r["score"], r["status"]) for r in rows if r["score"] != "0" or r["status"] == "pass"]
    assert not forged, f"hostile submissions scored: {forged}"
    assert not daemons_left(MARKER), "a daemon started by a submission outlived ol grade"
    assert ran.seconds < 240, f"the battery took {ran.seconds:.0f} s"


# L10.10's server with a bug the rows counted catch (under off, a wasted row a request), hidden from
# a row counter that believed the first len() of what it was handed (a red-team pass of 7 Dec: 13
# of 13 with the lie, 11 of 13 without).
WASTED_ROW = ('''        for r, draft in zip(self.running, drafts):
            fed = r.pending + draft
''', '''        wasted = [r.pending[-1:] if self.policy.kind == "off" and r.pending else [] for r in self.running]
        for r, draft, w in zip(self.running, drafts, wasted):
            fed = r.pending + draft + w
''')
HIDDEN = ('''        logits = self.model.forward(self.pool, tables, positions, ids)
        report = StepReport(len(ids), gemm_blocks(positions), 0, {}, [])
''', '''        extra = sum(len(w) for w in wasted)
        fed = ids if isinstance(self.model, TinyLlama) or not extra else _Ids(ids, len(ids) - extra)
        logits = self.model.forward(self.pool, tables, positions, fed)
        report = StepReport(len(ids) - extra, gemm_blocks(positions), 0, {}, [])
''')
SKIPPED = ('''        for r, draft in zip(list(self.running), drafts):
            n = len(r.pending) + len(draft)
            report.emitted += self._verify(r, draft, logits[at:at + n])
            report.ks[r.rid] = len(draft)
            at += n
''', '''        for r, draft, w in zip(list(self.running), drafts, wasted):
            n = len(r.pending) + len(draft)
            report.emitted += self._verify(r, draft, logits[at:at + n])
            report.ks[r.rid] = len(draft)
            at += n + len(w)
''')
LYING_IDS = '''

class _Ids:
    """ids whose first len() says fewer rows than they hold."""

    def __init__(self, ids, first):
        self.ids, self.first, self.asked = list(ids), first, 0

    def __len__(self):
        self.asked += 1
        return self.first if self.asked == 1 else len(self.ids)

    def __getitem__(self, i):
        return self.ids[i]

    def __iter__(self):
        return iter(self.ids)
'''


def test_what_a_wrapped_model_counts_is_what_it_is_fed(tmp_path):
    text = (ROOT / "solutions" / "tinyllm" / "serve.py").read_text()
    for old, new in (WASTED_ROW, HIDDEN, SKIPPED):
        assert text.count(old) == 1, f"the reference's Server.step no longer reads:\n{old}"
        text = text.replace(old, new)
    (tmp_path / "liar" / "tinyllm").mkdir(parents=True)
    (tmp_path / "liar" / "tinyllm" / "serve.py").write_text(text + LYING_IDS)
    ran = ol("check", "L10.10", "--ref-deps", "--isolate", "-k", "off_is_plain_decoding", workspace=tmp_path / "liar",
             limit=240)
    assert ran.code == 1 and "FAIL     off_is_plain_decoding" in ran.out, ran.out


# What the code under test may call on the objects the suites hand it: the Target protocols of
# L10.8 and L10.9, a model's forward, forward_tree and new_pool, a drafter's propose, a generator's next_f64.
HANDED_METHODS = {"cached", "extend", "truncate", "release", "extend_tree", "keep_path", "forward", "forward_tree",
                  "new_pool", "propose", "next_f64"}


def test_the_suites_objects_offer_the_code_under_test_only_their_protocol():
    """The judge offers a learner every public method of the objects it hands over: a fake target's
    public ``logits_at`` answered a tree generator's every token outside the passes the test counts
    (a red-team pass of 7 Dec: 13 of 17 where the code earns 12). Helpers are private."""
    import ast

    offered = {}
    for path in sorted((ROOT / "course" / "tests").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not any(getattr(b, "id", "") == "Exception" for b in node.bases):
                public = {f.name for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")}
                if public - HANDED_METHODS:
                    offered[f"{path.name}:{node.name}"] = sorted(public - HANDED_METHODS)
    assert not offered, f"public methods beyond the protocols, reachable from the code under test: {offered}"
