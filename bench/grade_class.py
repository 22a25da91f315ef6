"""Benchmark ``ol grade`` on a generated class: correct, buggy, hanging and hostile submissions.

    python bench/grade_class.py [--correct 60 --buggy 20 --hanging 10 --hostile 10] [--jobs 2] [--busy N]

Grades the whole class, then the correct submissions alone, checks every verdict (a correct one
passes with full marks; a buggy one, the reference with a named pitfall's patch, fails that
pitfall's named test; a hanging one does not pass; a hostile one, the stub with an attack, scores
0), and prints both wall times and their ratio, the bounds ol grade chose, each kind's own time
and the slowest test of a correct submission. ``--busy N`` keeps N CPU-bound loops running beside
it all the while (a machine that others use). Exits 1 when a verdict is wrong.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.commands.grade import json_names  # noqa: E402
from grader.core.patch import apply_patch  # noqa: E402
from grader.layout.catalog import load_catalog  # noqa: E402

HANGS = [
    "\n\ndef prompt_lookup(*args, **kwargs):\n    while True:\n        pass\n",
    ("\n\ndef verify_draft(*args, **kwargs):\n    import ctypes, signal\n"
     "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    ctypes.CDLL(None).sleep(3600)\n"),
]
HANG_AT_IMPORT = "while True:\n    pass\n"
ATTACKS = [
    ("import os, sys\nr = sys.modules.get('grader.child.recorder')\nif r is not None and r._fd >= 0:\n"
     "    r._send({'event': 'collected', 'tests': []})\n    r._send({'event': 'end', 'exitstatus': 0})\n    os._exit(0)\n"),
    "import sys\nsys.exit(0)\n",
    "print('20 of 20 tests passed')\nimport os\nos._exit(0)\n",
    "import sys\nsys.stdout.write('PASSED ' * (2 << 20))\n",
    ("import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
     " start_new_session=True)\n"),
    "import os\nfor _ in range(2000):\n    try:\n        os.fork()\n    except OSError:\n        break\n",
    # spinners, each in a session (a scheduler autogroup) of its own, while the learner's process answers
    ("import os\nif os.fork() == 0:\n    os.setsid()\n    for _ in range(60):\n        try:\n"
     "            if os.fork() == 0:\n                os.setsid()\n                break\n        except OSError:\n"
     "            break\n    while True:\n        pass\n"),
    ("import os, json\ntry:\n    env = dict(kv.split('=', 1) for kv in open(f'/proc/{os.getppid()}/environ').read()"
     ".split('\\0') if '=' in kv)\n    fd = os.open(f\"/proc/{os.getppid()}/fd/{env['OL_REPORT_FD']}\", os.O_WRONLY)\n"
     "    os.write(fd, json.dumps({'nonce': env['OL_REPORT_NONCE'], 'event': 'end'}).encode() + b'\\n')\n"
     "except Exception:\n    pass\n"),
    # half a message to the judge on the socket the learner's process shares with it, then silence
    ("import os, struct, time\nfor f in os.listdir('/proc/self/fd'):\n    try:\n"
     "        if os.readlink(f'/proc/self/fd/{f}').startswith('socket:'):\n"
     "            os.write(int(f), struct.pack('!LB', 1 << 20, 0) + b'x' * 10)\n    except OSError:\n"
     "        pass\ntime.sleep(3600)\n"),
]


def make_class(root: Path, counts: dict[str, int]) -> dict[str, tuple[str, str | None]]:
    """Write the submissions; return each one's kind and, for a buggy one, the test that must fail."""
    catalog = load_catalog()
    module = catalog.get("L10.8")
    reference = (catalog.reference / "tinyllm" / "spec.py").read_text()
    stub = (module.stubs / "spec.py").read_text()
    kinds: dict[str, tuple[str, str | None]] = {}

    def put(name: str, text: str, kind: str, must_fail: str | None = None) -> None:
        (root / name / "tinyllm").mkdir(parents=True)
        (root / name / "tinyllm" / "spec.py").write_text(text)
        kinds[name] = (kind, must_fail)

    for i in range(counts["correct"]):
        put(f"correct-{i:03d}", f"# learner {i}\n" + reference, "correct")
    for i in range(counts["buggy"]):
        pitfall = module.pitfalls[i % len(module.pitfalls)]
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(catalog.reference, Path(tmp) / "solutions")
            apply_patch(module.root / pitfall.mutant, Path(tmp))
            put(f"buggy-{i:03d}-{pitfall.id}", (Path(tmp) / "solutions" / "tinyllm" / "spec.py").read_text(), "buggy",
                pitfall.caught_by)
    for i in range(counts["hanging"]):
        text = HANG_AT_IMPORT + reference if i % 5 == 4 else reference + HANGS[i % len(HANGS)]
        put(f"hanging-{i:03d}", text, "hanging")
    for i in range(counts["hostile"]):
        put(f"hostile-{i:03d}", ATTACKS[i % len(ATTACKS)] + stub, "hostile")
    return kinds


def grade(paths: list[Path], out: Path, jobs: int) -> tuple[float, str]:
    """The wall time of ``ol grade`` on ``paths``, and what it printed."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "grader", "grade", "L10.8", *map(str, paths), "--jobs",
                           str(jobs), "--out", str(out)], cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True)
    return time.monotonic() - started, done.stdout


def seconds_by_kind(printed: str, kinds: dict[str, tuple[str, str | None]]) -> dict[str, list[float]]:
    """Each graded submission's own time (ol grade's line per submission), by kind."""
    found: dict[str, list[float]] = {}
    for name, seconds in re.findall(r"^\[\d+/\d+\] (\S+): .*\(([\d.]+) s\)$", printed, re.M):
        found.setdefault(kinds[name][0], []).append(float(seconds))
    return found


def slowest_correct_test(out: Path, kinds: dict[str, tuple[str, str | None]]) -> tuple[str, float]:
    """The longest any test of a correct submission took, and which."""
    files = dict(zip(kinds, json_names(list(kinds))))    # graded in the order of kinds
    durations = [(t["duration"], t["name"]) for name, (kind, _) in kinds.items() if kind == "correct"
                 for t in json.loads((out / files[name]).read_text())["tests"]]
    seconds, name = max(durations)
    return name, seconds


def wrong_verdicts(out: Path, kinds: dict[str, tuple[str, str | None]]) -> list[str]:
    wrong = []
    for row in csv.DictReader((out / "grades.csv").open()):
        kind, must_fail = kinds[row["submission"]]
        failed = row["failed_tests"].split(";") if row["failed_tests"] else []
        ok = {"correct": row["status"] == "pass" and row["score"] == row["max_score"],
              "buggy": row["status"] == "fail" and must_fail in failed,
              "hanging": row["status"] != "pass",
              "hostile": row["score"] == "0" and row["status"] != "pass"}[kind]
        if not ok:
            wrong.append(f"{row['submission']}: {row['status']} {row['score']}/{row['max_score']} {row['hint'][:120]}")
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for kind, default in (("correct", 60), ("buggy", 20), ("hanging", 10), ("hostile", 10)):
        parser.add_argument(f"--{kind}", type=int, default=default)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--busy", type=int, default=0, metavar="N", help="CPU-bound loops running beside it")
    args = parser.parse_args()
    counts = {k: getattr(args, k) for k in ("correct", "buggy", "hanging", "hostile")}
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        return bench(args.jobs, counts, args.busy)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def bench(jobs: int, counts: dict[str, int], busy: int) -> int:
    with tempfile.TemporaryDirectory(prefix="ol-bench-class-") as tmp:
        root = Path(tmp)
        kinds = make_class(root / "subs", counts)
        paths = [root / "subs" / name for name in kinds]
        whole, printed = grade(paths, root / "all", jobs)
        wrong = wrong_verdicts(root / "all", kinds)
        slowest = slowest_correct_test(root / "all", kinds)
        correct = [p for p in paths if kinds[p.name][0] == "correct"]
        alone, _ = grade(correct, root / "correct", jobs)
    print(f"ol grade, {len(paths)} submissions ({', '.join(f'{n} {k}' for k, n in counts.items())}), "
          f"--jobs {jobs}, {busy} busy loops beside it: {whole:.0f} s")
    print(f"the {len(correct)} correct ones alone: {alone:.0f} s; ratio {whole / alone:.2f}")
    print(next((line for line in printed.splitlines() if line.startswith("The reference passes")), ""))
    for kind, times in seconds_by_kind(printed, kinds).items():
        print(f"  {kind}: {len(times)} submissions, {sum(times):.0f} s in all, {max(times):.1f} s the longest")
    print(f"  the slowest test of a correct submission: {slowest[0]}, {slowest[1]:.2f} s")
    print(f"wrong verdicts: {len(wrong)}")
    for line in wrong:
        print(f"  {line}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
