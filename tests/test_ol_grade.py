"""``ol grade``: a class's submissions graded side by side, bad ones bounded, none modified."""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from ol_helpers import REFERENCE, ROOT, daemons_left, ol
from test_ol_diagnosis import learner_workspace

from grader.commands.grade import json_names, per_test_timeouts

pytestmark = pytest.mark.usefixtures("sandboxed")  # every test here grades: bubblewrap

STUB = ROOT / "course" / "stubs" / "L10.8" / "spec.py"
MARKER = "ol-grade-test-daemon-7f3a"

# Each hostile submission is the reference's spec.py with this prepended.
HOSTILE = {
    "hangs": "while True:\n    pass\n",
    "floods": "import sys\nsys.stdout.write('x' * (10 << 20))\nsys.stdout.flush()\n",
    "forks": ("import os\nfor _ in range(10000):\n    try:\n        os.fork()\n    except OSError:\n        break\n"),
    "daemon": ("import subprocess, sys\n"
               f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # {MARKER}'],"
               " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"),
    "exits": "import os\nos._exit(0)\n",
}


def slowed(seconds: float) -> str:
    """Appended to the reference's spec.py: every draft of prompt_lookup computes ``seconds`` of CPU
    time longer (bounds are CPU time)."""
    return ("\n_prompt_lookup = prompt_lookup\n\n\ndef prompt_lookup(*args, **kwargs):\n"
            f"    import time\n    start = time.process_time()\n    while time.process_time() - start < {seconds}:\n"
            "        pass\n    return _prompt_lookup(*args, **kwargs)\n")


# Every draft takes a second: tests time out one after another until the whole check's bound.
SLOW = slowed(1)


def spec_with(prefix: str) -> str:
    return prefix + (REFERENCE / "spec.py").read_text()


def make_folder(root: Path, name: str, text: str, nested: str | None = None) -> Path:
    package = root / name / (nested or "") / "tinyllm"
    package.mkdir(parents=True)
    (package / "spec.py").write_text(text)
    return root / name


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def test_grade_mixed_class(tmp_path):
    subs = tmp_path / "subs"
    good = make_folder(subs, "alice", (REFERENCE / "spec.py").read_text())
    nested = make_folder(subs, "bob", (REFERENCE / "spec.py").read_text(), nested="my-work")
    stub = make_folder(subs, "carol", STUB.read_text())
    broken = make_folder(subs, "dave", "def (\n")
    zipped = subs / "erin.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.write(REFERENCE / "spec.py", "erin-work/tinyllm/spec.py")
    hostile = [make_folder(subs, name, spec_with(prefix)) for name, prefix in HOSTILE.items()]
    slow = make_folder(subs, "slow", (REFERENCE / "spec.py").read_text() + SLOW)
    empty = subs / "frank"
    empty.mkdir()
    everything = [good, nested, stub, broken, zipped, empty, *hostile, slow]
    before = {p.name: tree_digest(p) if p.is_dir() else p.read_bytes() for p in everything}

    out = tmp_path / "out"
    ran = ol("grade", "L10.8", *map(str, everything), "--jobs", "2", "--out", str(out),
             "--timeout", "6", "--limit", "20", limit=300)
    assert ran.code == 0, ran.text

    rows = list(csv.reader((out / "grades.csv").open()))
    assert rows[0] == ["submission", "score", "max_score", "status", "failed_tests", "hint"]
    by_name = {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}
    assert list(by_name) == [p.name for p in everything]
    files = dict(zip(by_name, json_names(list(by_name))))
    for name in ("alice", "bob", "erin.zip", "floods"):
        assert (by_name[name]["status"], by_name[name]["score"], by_name[name]["max_score"]) == ("pass", "20", "20"), name
    assert by_name["carol"]["status"] == "fail" and by_name["carol"]["score"] == "0"
    assert by_name["dave"]["status"] == "error" and "SyntaxError" in by_name["dave"]["hint"]
    assert by_name["frank"]["status"] == "error" and "no tinyllm/ folder" in by_name["frank"]["hint"]
    for name in ("hangs", "exits"):
        assert by_name[name]["status"] == "error" and by_name[name]["score"] == "0", by_name[name]
    # A fork bomb or a daemon may pass its tests (the code is the reference's), but is bounded and cleaned up.
    assert by_name["forks"]["status"] in ("pass", "fail", "error")
    assert not daemons_left(MARKER), "a daemon started by a submission outlived ol grade"

    results = json.loads((out / files["alice"]).read_text())
    assert (results["version"], results["status"], results["message"], results["score"]) == (3, "pass", None, 20)
    assert str(tmp_path) not in (out / files["dave"]).read_text()
    after = {p.name: tree_digest(p) if p.is_dir() else p.read_bytes() for p in everything}
    assert after == before, "ol grade changed a submission"
    assert "Graded 12 submissions" in ran.out
    # A draft costs a second of CPU: the tests that draft time out, each alone (on a loaded machine
    # the clock's bound may come first), until the check's CPU is spent.
    slow = json.loads((out / files["slow"]).read_text())
    timed_out = [t["name"] for t in slow["tests"] if (t["message"] or "").startswith("timed out")]
    assert len(timed_out) >= 2 and slow["status"] != "pass", slow
    for file in files.values():
        check_results_v3(json.loads((out / file).read_text()))


def check_results_v3(results: dict) -> None:
    """The rules of exercism's test-runner results, version 3 (building/tooling/test-runners/interface.md)."""
    assert results["version"] == 3
    assert results["status"] in ("pass", "fail", "error")
    if results["status"] == "error":
        assert isinstance(results["message"], str) and results["message"], results
    else:
        assert results["message"] is None, "a top-level message only with status error"
        statuses = {t["status"] for t in results["tests"]}
        assert (results["status"] == "pass") == (statuses == {"pass"}), results["status"]
    for test in results["tests"]:
        assert isinstance(test["name"], str) and test["name"]
        assert test["status"] in ("pass", "fail", "error")
        assert (test["message"] is None) == (test["status"] == "pass")
        assert isinstance(test["test_code"], str) and test["test_code"].strip()
        assert "task_id" not in test or isinstance(test["task_id"], int)
        assert "/tmp/" not in (test["message"] or "") and "/work/" not in (test["message"] or "")
    assert "/tmp/" not in (results["message"] or "")


def test_grade_refuses_a_missing_submission(tmp_path):
    ran = ol("grade", "L10.8", str(tmp_path / "nobody"), "--out", str(tmp_path / "out"))
    assert ran.code == 2 and "no such submission" in ran.err


def test_points_come_from_the_catalog(tmp_path):
    course = tmp_path / "course-root"
    course.mkdir()
    for part in ("fixtures", "solutions"):
        os.symlink(ROOT / part, course / part)
    # A copy of the course whose first test is worth 5 points.
    shutil.copytree(ROOT / "course", course / "course", ignore=shutil.ignore_patterns("__pycache__"))
    toml = course / "course" / "modules" / "L10.8.toml"
    toml.write_text(toml.read_text().replace('name = "hand_example_prompt_lookup"\n',
                                             'name = "hand_example_prompt_lookup"\npoints = 5\n', 1))
    stub = make_folder(tmp_path / "subs", "stub", STUB.read_text().replace(
        "def prompt_lookup", "def prompt_lookup_stub") + "\n" + _prompt_lookup_source())
    out = tmp_path / "out"
    ran = ol("grade", "L10.8", str(stub), "--out", str(out), env={"OL_COURSE_ROOT": str(course)},
             limit=200)
    assert ran.code == 0, ran.text
    row = list(csv.reader((out / "grades.csv").open()))[1]
    # prompt_lookup's two tests pass: the hand example's 5 points and the recorded contexts' 1.
    assert row[1:4] == ["6", "24", "fail"], row


def test_each_test_is_bounded_from_the_reference(tmp_path):
    """Without --timeout each test gets 10 times the reference's time, at least 2 s: a prompt_lookup
    that takes half a second per call fails the hand example (8 calls), which the catalog's 10 s allow."""
    sleepy = make_folder(tmp_path / "subs", "sleepy", (REFERENCE / "spec.py").read_text() + slowed(0.5))
    out = tmp_path / "out"
    ran = ol("grade", "L10.8", str(sleepy), "--out", str(out), "--limit", "30", limit=300)
    assert ran.code == 0, ran.text
    assert re.search(r"each test by 2 to [\d.]+ s \(10 times the reference's, at least 2 s, at most the catalog's 10 s\)",
                     ran.out), ran.out
    tests = {t["name"]: t for t in json.loads((out / "001-sleepy.json").read_text())["tests"]}
    hand = tests["hand_example_prompt_lookup"]
    # 2 s of CPU; on a machine too busy to give it 2 s of CPU within 4 s, the clock's bound ends it first.
    assert hand["status"] != "pass" and re.search(r"timed out after (2 s|4 s on the clock)", hand["message"]), hand
    assert tests["config_parses_runtime_values"]["status"] == "pass"


def test_per_test_timeouts_rule():
    results = {"tests": [{"name": "quick", "duration": 0.003}, {"name": "medium", "duration": 0.44},
                         {"name": "long", "duration": 1.5}]}
    assert per_test_timeouts(results, 10.0) == {"quick": 2.0, "medium": 4.4, "long": 10.0}


def _prompt_lookup_source() -> str:
    """The reference's prompt_lookup, on its own (the stub keeps its other functions unwritten)."""
    text = (REFERENCE / "spec.py").read_text()
    start = text.index("def prompt_lookup(")
    end = text.index("\ndef ", start + 1)
    return text[start:end]


def replaying_pcg32() -> str:
    """A PCG32 that never steps: the public fixture's PCG32 streams (and the published vector)
    replayed from a table, a counter everywhere else (after a red team's submission, which also
    tabled the streams of the sampler's recorded cases)."""
    golden = json.loads((ROOT / "fixtures" / "L10.1" / "sampler_golden.json").read_text())["pcg32"]
    def as_u32s(f: float) -> list[int]:  # two u32 draws next_f64 turns into f
        n = int(f * 2**53)
        return [(n >> 26) << 5, (n & (2**26 - 1)) << 6]

    table = {(c["seed"], c["stream"]): c["u32"] + [u for f in c["f64"] for u in as_u32s(f)] for c in golden}
    reference = (REFERENCE / "pcg32.py").read_text()
    table.setdefault((42, 54), [0xA15C02B7, 0x7B47F409, 0xBA1D3330, 0x83D2F293, 0xBFA4784B, 0xCBED606E])
    return (reference.split("class Pcg32")[0] + f"TABLE = {table!r}\n\n\nclass Pcg32:\n"
            "    def __init__(self, seed, stream=54):\n"
            "        for value in (seed, stream):\n"
            "            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MASK64:\n"
            "                raise ValueError(f'bad seed or stream {value!r}')\n"
            "        self.replay, self.state = list(TABLE.get((seed, stream), [])), seed ^ stream\n\n"
            "    def next_u32(self):\n"
            "        if self.replay:\n"
            "            return self.replay.pop(0)\n"
            "        self.state = (self.state + 2654435761) & MASK64\n"
            "        return self.state & MASK32\n\n"
            "    def next_f64(self):\n"
            "        return ((self.next_u32() >> 5) * 2**26 + (self.next_u32() >> 6)) / 2**53\n")


def test_a_replay_of_the_public_fixtures_fails_the_streams_a_grading_draws(tmp_path):
    """Every stream the graded tests fix is public, so a table of them passes ``ol check``; ``ol grade``
    also draws streams when it runs, from a seed it prints and records, and the table fails those."""
    workspace = tmp_path / "ws"
    package = workspace / "tinyllm"
    package.mkdir(parents=True)
    for name in ("sampling.py", "kvpool.py"):
        shutil.copyfile(REFERENCE / name, package / name)
    (package / "pcg32.py").write_text(replaying_pcg32())
    checked = ol("check", "L10.1", "-k", "pcg32_matches_golden_streams", workspace=workspace)
    assert checked.code == 0, checked.text

    graded = {}
    for run, seed in (("first", "12345"), ("again", "12345")):
        out = tmp_path / run
        ran = ol("grade", "L10.1", str(workspace), "--seed", seed, "--out", str(out), "--timeout", "20", "--limit", "200",
                 "--no-hints", limit=300)
        assert ran.code == 0, ran.text
        assert f"seed {seed} (--seed {seed} grades the same again)" in ran.out
        results = json.loads(next(out.glob("001-*.json")).read_text())
        graded[run] = results
        assert results["drawn_seed"] == int(seed)
        failed = {t["name"]: t["message"] for t in results["tests"] if t["status"] != "pass"}
        assert "pcg32_matches_golden_streams" in failed, failed
        assert "(drawn when graded)" in failed["pcg32_matches_golden_streams"]
    verdicts = {run: [(t["name"], t["status"], t["message"]) for t in r["tests"]] for run, r in graded.items()}
    assert verdicts["first"] == verdicts["again"]
    refused = ol("grade", "L10.1", str(workspace), "--seed", "-1", "--out", str(tmp_path / "bad"))
    assert refused.code == 2 and "--seed must be an integer in [0, 2**63), got -1" in refused.err, refused.text


def test_a_pitfall_graded_gets_its_hint_unless_told_not_to(tmp_path):
    """A submission that is a named pitfall has that pitfall's hint in grades.csv; ``--no-hints``
    grades it the same, writes no hint and computes no pitfall's answers (its answer cache stays empty)."""
    ws = learner_workspace(tmp_path / "s02", ROOT / "course" / "mutants" / "L10.8" / "s02.patch")
    rows, cache = {}, tmp_path / "cache"
    for flags in ((), ("--no-hints",)):
        out = tmp_path / f"out{len(flags)}"
        ran = ol("grade", "L10.8", str(ws), "--seed", "77", "--timeout", "20", "--limit", "200", "--out", str(out),
                 *flags, env={"OL_CACHE_DIR": str(cache)} if flags else None, limit=300)
        assert ran.code == 0, ran.text
        assert ("No hints (--no-hints)" in ran.out) == bool(flags), ran.out
        rows[flags] = next(csv.DictReader((out / "grades.csv").open()))
    hinted, plain = rows[()], rows[("--no-hints",)]
    assert hinted["hint"].startswith("Hint: pitfall s02,"), hinted
    assert plain["hint"] == "" and plain["score"] == hinted["score"] != "20", (hinted, plain)
    assert plain["failed_tests"] == hinted["failed_tests"], (hinted, plain)
    assert not cache.exists() or not any(cache.rglob("*.json")), sorted(cache.rglob("*"))[:5]


def public_cases_only_spec() -> str:
    """The reference's L10.8 answers on the fixture's public contexts and rounds and on nothing else:
    a table's reach (prompt_lookup and ngram_draft answer from a table, verify_draft refuses rows
    it has not seen)."""
    golden = json.loads((ROOT / "fixtures" / "L10.8" / "spec_golden.json").read_text())
    lookups = {(tuple(c["ctx"]), c["k"], c["max_ngram"], c["min_ngram"]): c["draft"] for c in golden["prompt_lookup"]}
    ngrams = {(tuple(c["ctx"]), c["k"], c["n"]): c["draft"] for c in golden["ngram"]}
    rows = sorted({tuple(c["rows"]) for c in golden["verify"]})
    return ((REFERENCE / "spec.py").read_text() + f"\n\nLOOKUPS = {lookups!r}\nNGRAMS = {ngrams!r}\nROWS = {rows!r}\n"
            "_verify = verify_draft\n\n\n"
            "def prompt_lookup(ctx, k, max_ngram=3, min_ngram=1):\n"
            "    return LOOKUPS.get((tuple(ctx), k, max_ngram, min_ngram), [])\n\n\n"
            "def ngram_draft(ctx, k, n=3):\n"
            "    return NGRAMS.get((tuple(ctx), k, n), [])\n\n\n"
            "def verify_draft(rows, *args):\n"
            "    if tuple(np.asarray(r, dtype='<f4').tobytes().hex() for r in rows) not in set(ROWS):\n"
            "        raise SpecError('not a public round')\n"
            "    return _verify(rows, *args)\n")


def passes_checked_fails_graded(tmp_path: Path, module: str, file: str, text: str, tests: list[str], seed: str,
                                copied: tuple[str, ...] = ()) -> None:
    """A submission whose ``file`` is ``text`` (and the reference's ``copied`` files) passes ``tests``
    in ``ol check`` and fails each of them in ``ol grade --seed seed`` on a case drawn when graded."""
    workspace = tmp_path / "ws"
    (workspace / "tinyllm").mkdir(parents=True)
    (workspace / "tinyllm" / file).write_text(text)
    for name in copied:
        shutil.copyfile(REFERENCE / name, workspace / "tinyllm" / name)
    checked = ol("check", module, "--ref-deps", "-k", " or ".join(tests), workspace=workspace)
    assert all(f"pass     {t}" in checked.out for t in tests), checked.text
    out = tmp_path / "out"
    ran = ol("grade", module, str(workspace), "--seed", seed, "--out", str(out), "--timeout", "20", "--limit", "200",
             "--no-hints", limit=400)
    assert ran.code == 0, ran.text
    results = json.loads(next(out.glob("001-*.json")).read_text())
    failed = {t["name"]: t["message"] for t in results["tests"] if t["status"] != "pass"}
    for test in tests:
        assert test in failed and "(drawn when graded)" in failed[test], failed


def test_a_table_of_l10_8_s_public_cases_fails_the_cases_a_grading_draws(tmp_path):
    """L10.8's recorded tests also draw cases when graded (contexts and rounds as the fixture's
    oracle draws them, answered by the reference in the judge): a table of the public cases passes
    ``ol check`` and fails ``ol grade``."""
    passes_checked_fails_graded(tmp_path, "L10.8", "spec.py", public_cases_only_spec(),
                                ["prompt_lookup_matches_python_l8_6", "ngram_draft_matches_python_l8_6",
                                 "verify_matches_python_l8_6"], "777")


def test_a_table_of_the_sampler_s_recorded_cases_fails_the_cases_a_grading_draws(tmp_path):
    """``sampler_matches_golden`` draws twelve cases when graded: a sampler that answers the 120
    public ones from a table passes ``ol check`` and fails ``ol grade``."""
    golden = json.loads((ROOT / "fixtures" / "L10.1" / "sampler_golden.json").read_text())["sampling"]
    table = {json.dumps([np.float32(c["logits"]).tolist(), c["prompt"], c["output"], sorted(c["params"].items())]): c["distribution"]
             for c in golden}
    text = ((REFERENCE / "sampling.py").read_text() + f"\n\nimport json as _json\nTABLE = {table!r}\n\n\n"
            "def distribution(logits, params, prompt, output):\n"
            "    key = [[float(x) for x in logits], list(prompt), list(output),\n"
            "           sorted((n, getattr(params, n)) for n in params.__dataclass_fields__)]\n"
            "    want = TABLE.get(_json.dumps(key))\n"
            "    return np.array(want) if want else np.full(len(logits), 1 / len(logits))\n")
    passes_checked_fails_graded(tmp_path, "L10.1", "sampling.py", text, ["sampler_matches_golden"], "2718",
                                copied=("pcg32.py", "kvpool.py"))


# A server that places admissions only where the public cases look (prompts of 5 and 6 tokens),
# in arrival order elsewhere.
PLACED_WHERE_PUBLIC = '''

_placing_admit = Server._admit


def _admit(self):
    if all(len(r.prompt) in (5, 6) for r in self.queue):
        return _placing_admit(self)
    place, self.place = self.place, False
    try:
        return _placing_admit(self)
    finally:
        self.place = place


Server._admit = _admit
'''


def test_a_table_of_l10_10_s_public_cases_fails_the_cases_a_grading_draws(tmp_path):
    """``adaptive_matches_recorded`` draws twelve steps when graded, and the admission test six
    scenarios: a table of the 160 public steps, and placement only where the public queues look,
    pass ``ol check`` and fail ``ol grade``."""
    golden = json.loads((ROOT / "fixtures" / "L10.10" / "serve_golden.json").read_text())["adaptive"]
    table = {json.dumps([c["lanes"], c["cost"]]): c["expect"] for c in golden}
    text = ((REFERENCE / "serve.py").read_text() + f"\n\nimport json as _json\nTABLE = {table!r}\n\n\n"
            "def adaptive_ks(lanes, cost):\n"
            "    key = [[[l.start, l.fixed, l.cap, [float(a) for a in l.rates]] for l in lanes],\n"
            "           [list(cost.block_seconds), cost.row_seconds, cost.request_seconds, cost.draft_seconds]]\n"
            "    return TABLE.get(_json.dumps(key), [0] * len(lanes))\n" + PLACED_WHERE_PUBLIC)
    passes_checked_fails_graded(tmp_path, "L10.10", "serve.py", text,
                                ["adaptive_matches_recorded", "admission_placed_never_starved"], "4242")


def test_a_table_of_l10_9_s_recorded_trees_fails_the_trees_a_grading_draws(tmp_path):
    """L10.9's recorded shape and suffix-tree tests draw eight cases each when graded: a table of the
    public ones passes ``ol check`` and fails ``ol grade``."""
    golden = json.loads((ROOT / "fixtures" / "L10.9" / "trees_golden.json").read_text())
    shapes = {tuple(c["parents"]): c["expect"] for c in golden["shape"]}
    suffixes = {json.dumps([c["ctx"], c["pending"], c["k"], c["width"], c["max_ngram"], c["min_ngram"]]): c["expect"]
                for c in golden["suffix_tree"]}
    text = ((REFERENCE / "trees.py").read_text()
            + f"\n\nimport json as _json\nSHAPES = {shapes!r}\nSUFFIXES = {suffixes!r}\n\n\n"
            "def tree_depths(parents):\n"
            "    if tuple(parents) not in SHAPES:\n"
            "        raise TreeError('not a public tree')\n"
            "    return SHAPES[tuple(parents)]['depths']\n\n\n"
            "def _propose(self, ctx, pending, k):\n"
            "    want = SUFFIXES.get(_json.dumps([list(ctx), pending, k, self.width, self.max_ngram, self.min_ngram]))\n"
            "    want = want or {'tokens': [pending], 'parents': [-1]}\n"
            "    return DraftTree(want['tokens'], want['parents'])\n\n\n"
            "SuffixTreeDrafter.propose = _propose\n")
    passes_checked_fails_graded(tmp_path, "L10.9", "trees.py", text,
                                ["tree_shape_matches_recorded", "suffix_tree_matches_recorded"], "31337")


def public_rounds_and_requests_only_trees() -> str:
    """The reference's L10.9 answers on the public rounds (L10.9's and L10.8's) and requests and on
    nothing else: a table's reach (verify_tree refuses rows it has not seen, generate_tree requests it
    has not seen; a public request's own rounds are verified, as a table of its answers would give them)."""
    trees = json.loads((ROOT / "fixtures" / "L10.9" / "trees_golden.json").read_text())
    spec = json.loads((ROOT / "fixtures" / "L10.8" / "spec_golden.json").read_text())
    rows = sorted({tuple(c["rows"]) for c in trees["verify"] + spec["verify"]})
    requests = sorted({json.dumps([c["prompt"], c["seed"], c["max_new"]]) for c in trees["generate"]})
    return ((REFERENCE / "trees.py").read_text()
            + f"\n\nimport json as _json\nROWS = set({rows!r})\nREQUESTS = set({requests!r})\n"
            "_verify, _generate, _generating = verify_tree, generate_tree, []\n\n\n"
            "def verify_tree(rows, *args):\n"
            "    if not _generating and tuple(np.asarray(r, dtype='<f4').tobytes().hex() for r in rows) not in ROWS:\n"
            "        raise TreeError('not a public round')\n"
            "    return _verify(rows, *args)\n\n\n"
            "def generate_tree(target, drafter, prompt, params, seed, max_new, *args):\n"
            "    if _json.dumps([[int(t) for t in prompt], seed, max_new]) not in REQUESTS:\n"
            "        raise TreeError('not a public request')\n"
            "    _generating.append(True)\n"
            "    try:\n"
            "        return _generate(target, drafter, prompt, params, seed, max_new, *args)\n"
            "    finally:\n"
            "        _generating.pop()\n")


def test_a_table_of_l10_9_s_recorded_rounds_and_requests_fails_those_a_grading_draws(tmp_path):
    """L10.9's recorded rounds, L10.8's rounds as chains and the recorded requests draw eight more
    each when graded: a trees.py that answers only the public ones passes ``ol check`` and fails
    ``ol grade``."""
    passes_checked_fails_graded(tmp_path, "L10.9", "trees.py", public_rounds_and_requests_only_trees(),
                                ["verify_tree_matches_recorded", "chain_tree_verifies_as_l10_8",
                                 "tree_generation_matches_recorded"], "2718")


@pytest.mark.parametrize("module, seed", [("L10.1", "101"), ("L10.8", "808"), ("L10.9", "909"), ("L10.10", "1010")])
def test_the_reference_passes_every_test_graded(tmp_path, module, seed):
    """Graded, the tests add cases drawn then, answered by the reference in the judge, and ``ol grade``
    grades the reference first under the same seed: it must pass every test, drawn cases and all, or
    nothing is graded (a drawn case the card's rule does not fix would stop a class's grading here).
    The submission is the module's stubs, which fail fast."""
    workspace = tmp_path / "ws"
    shutil.copytree(ROOT / "course" / "stubs" / module, workspace / "tinyllm")
    out = tmp_path / "out"
    ran = ol("grade", module, str(workspace), "--seed", seed, "--out", str(out), limit=400)
    assert ran.code == 0 and "The reference passes in" in ran.out, ran.text
    results = json.loads(next(out.glob("001-*.json")).read_text())
    assert results["drawn_seed"] == int(seed) and results["status"] == "fail", results


COUNT_DRAWN = """
import importlib, json, sys
suite = importlib.import_module(sys.argv[1])
print(json.dumps({name: sum("(drawn when graded)" in c.label for c in getattr(suite, f"cases_{name}")())
                  for name in sys.argv[2:]}))
"""


@pytest.mark.parametrize("seed", [None, "5"])
def test_every_drawing_test_adds_cases_when_graded_and_none_when_checked(seed):
    """Each test that calls ``drawn`` builds cases of its own when a grading's seed is set, and ``ol
    check`` (no seed) builds the public ones alone: removing a test's draws fails here."""
    from grader.layout.catalog import load_catalog
    from grader.verdict.diagnose import drawing_tests

    for module in load_catalog().modules.values():
        names = sorted(drawing_tests(module))
        env = {k: v for k, v in os.environ.items() if k != "OL_DRAWN_SEED"}
        env |= {"OL_IMPL": str(REFERENCE.parent), "PYTHONPATH": str(ROOT)} | ({"OL_DRAWN_SEED": seed} if seed else {})
        ran = subprocess.run([sys.executable, "-c", COUNT_DRAWN, module.suite.stem, *names], cwd=module.suite.parent,
                             env=env, capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr[-2000:]
        counts = json.loads(ran.stdout.strip().splitlines()[-1])
        if seed is None:
            assert not any(counts.values()), (module.id, counts)
        else:
            assert names and all(counts.values()), (module.id, counts)


def test_every_test_that_draws_names_itself_where_the_diagnosis_finds_it():
    """The diagnosis keeps a drawing test's answers apart for each grading's seed, and it finds the
    drawing tests by their ``drawn("<test>")`` calls, each in its ``cases_<test>()``: a draw reached
    another way would leave one seed's answers where ``ol check``'s are kept."""
    from grader.layout.catalog import load_catalog
    from grader.verdict.diagnose import drawing_tests

    for module in load_catalog().modules.values():
        text = module.suite.read_text()
        calls = re.findall(r"\bdrawn\(([^)]*)\)", text)
        assert all(re.fullmatch(r'"\w+"', c) for c in calls), f"{module.suite.name}: drawn({calls})"
        assert drawing_tests(module) <= set(module.test_names), module.id
        # the diagnosis answers a test's cases as cases_<test>() builds them: a draw made elsewhere (in
        # test_<test>(), say) is checked but never compared with the pitfalls', and its hint is lost
        for function in ast.parse(text).body:
            if isinstance(function, ast.FunctionDef):
                for node in ast.walk(function):
                    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "drawn":
                        assert function.name == f"cases_{node.args[0].value}", \
                            f"{module.suite.name}: drawn({node.args[0].value!r}) in {function.name}()"
