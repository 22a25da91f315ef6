"""Wall times of ``ol check`` on a failing file, diagnosis included: the first check after
``ol start`` and later (warm) checks, for L10.8 and L10.9; and ``ol check`` on a passing file.

    python bench/grader_timing.py [--modules L10.8 L10.9] [--first-runs 3] [--check-runs 5]
                                  [--hog 1] [--mutant-runs 0]

The failing file is the reference's with a named pitfall's patch (s06 for L10.8, t10 for L10.9),
checked with ``--ref-deps`` as a learner who has not written the modules it needs would.

- *first check after ol start*: an empty answer cache; ``ol start`` (which launches the warmer in
  the background, as it does for a learner), the failing file written in at once, then ``ol check``.
  The time printed runs from ``ol start``, so it includes the warmer's head start (none to speak of).
- *warm*: later checks of the same file, the cache filled.

``--hog N`` runs N CPU-bound processes beside the checks (default 1: the issue's "one other job").
The machine's load average is printed first: on a shared machine wall times grow with it.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PITFALL = {"L10.8": "s06", "L10.9": "t10", "L10.1": "p03"}


def ol() -> list[str]:
    script = shutil.which("ol")
    return [script] if script else [sys.executable, "-m", "grader"]


def run(args: list[str], cwd: Path, cache: Path, expect: int, warm: bool = False) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system of its waited-for children) of one ``ol`` run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OL_CACHE_DIR": str(cache), "OL_LAST_WORKSPACE_FILE": ""}
    env.pop("OL_NO_WARM", None) if warm else env.update(OL_NO_WARM="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([*ol(), *args], cwd=cwd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        sys.exit(f"ol {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def failing_file(module: dict, workspace: Path) -> None:
    """The module's learner files, the reference's with the pitfall's patch, into ``workspace``."""
    for name in module["learner_files"]:
        shutil.copyfile(ROOT / "solutions" / "tinyllm" / name, workspace / "tinyllm" / name)
    pitfall = next(p for p in module["pitfall"] if p["id"] == PITFALL[module["id"]])
    patch = (ROOT / pitfall["mutant"]).read_text().replace("solutions/tinyllm/", "tinyllm/")
    subprocess.run(["patch", "-s", "-p1"], input=patch, text=True, cwd=workspace, check=True)


def wait_for_warmer(cache: Path, module_id: str) -> None:
    """Until the background warmer of ``module_id`` has let go of its lock (it has finished)."""
    lock_file = cache / module_id / "warming.lock"
    while True:
        try:
            with open(lock_file, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
        except (BlockingIOError, FileNotFoundError):
            time.sleep(0.5)


def report(label: str, walls: list[float], cpus: list[float]) -> None:
    shown = ", ".join(f"{w:.2f}" for w in walls)
    print(f"{label}: median {statistics.median(walls):.2f} s wall over {len(walls)} runs ({shown}); "
          f"median CPU {statistics.median(cpus):.2f} s", flush=True)


def bench_module(module: dict, tmp: Path, first_runs: int, check_runs: int) -> None:
    mid = module["id"]
    check = ["check", mid, *(["--ref-deps"] if module.get("needs") else [])]
    what = f"ol check {' '.join(check[2:])}".rstrip()
    firsts, first_cpus, cache, ws = [], [], tmp, tmp
    for n in range(first_runs):
        cache, ws = tmp / f"{mid}-cache-{n}", tmp / f"{mid}-ws-{n}"
        started = time.perf_counter()
        _, start_cpu = run(["start", mid, "--workspace", str(ws)], tmp, cache, 0, warm=True)
        failing_file(module, ws)
        _, cpu = run(check, ws, cache, 1)
        firsts.append(time.perf_counter() - started)
        first_cpus.append(start_cpu + cpu)
        wait_for_warmer(cache, mid)
    report(f"{mid}: {what}, failing file ({PITFALL[mid]}), first check after ol start (from ol start)",
           firsts, first_cpus)
    warm = [run(check, ws, cache, 1) for _ in range(check_runs)]
    report(f"{mid}: {what}, failing file ({PITFALL[mid]}), warm", [w for w, _ in warm], [c for _, c in warm])
    passing = tmp / f"{mid}-passing"
    (passing / "tinyllm").mkdir(parents=True)
    for name in module["learner_files"]:
        shutil.copyfile(ROOT / "solutions" / "tinyllm" / name, passing / "tinyllm" / name)
    ok = [run(check, passing, cache, 0) for _ in range(check_runs)]
    report(f"{mid}: {what}, passing file", [w for w, _ in ok], [c for _, c in ok])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", nargs="+", default=["L10.8", "L10.9"])
    parser.add_argument("--first-runs", type=int, default=3)
    parser.add_argument("--check-runs", type=int, default=5)
    parser.add_argument("--hog", type=int, default=1, help="CPU-bound processes running beside the checks")
    parser.add_argument("--mutant-runs", type=int, default=0)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{args.hog} CPU-bound job(s) beside the checks", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # so the hogs are stopped below
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hog)]
    try:
        with tempfile.TemporaryDirectory(prefix="ol-bench-") as tmp:
            for module_id in args.modules:
                module = tomllib.loads((ROOT / "course" / "modules" / f"{module_id}.toml").read_text())
                bench_module(module, Path(tmp), args.first_runs, args.check_runs)
                if args.mutant_runs:
                    runs = [run(["mutants", module_id], ROOT, Path(tmp) / "mutants-cache", 0)
                            for _ in range(args.mutant_runs)]
                    report(f"ol mutants {module_id}", [w for w, _ in runs], [c for _, c in runs])
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
