"""Median wall times of ``ol check`` on a passing and on a failing file, and of ``ol mutants``.

    python bench/grader_timing.py [--check-runs 5] [--mutant-runs 3] [--module L10.8] [--pitfall s06]

Each run is the real command in a temporary workspace. The passing file is the reference's; the
failing one is the reference with a named pitfall's patch, so ``ol check`` diagnoses it: the first
run fills an empty answer cache (the reference's and every pitfall's answers), the later runs
find it filled, as a learner's second check does.
The machine's load average is printed first: on a shared machine wall times grow with it, CPU
times (user + system of every process the command started) much less.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ol() -> list[str]:
    script = shutil.which("ol")
    return [script] if script else [sys.executable, "-m", "grader"]


def timed(args: list[str], cwd: Path, cache: Path, expect: int = 0) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, all child processes) of one ``ol`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([*ol(), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OL_CACHE_DIR": str(cache)})
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        sys.exit(f"ol {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def report(label: str, runs: list[tuple[float, float]]) -> None:
    walls = [w for w, _ in runs]
    shown = ", ".join(f"{w:.2f}" for w in walls)
    cpu = statistics.median(c for _, c in runs)
    print(f"{label}: median {statistics.median(walls):.2f} s wall over {len(runs)} runs ({shown}); "
          f"median CPU {cpu:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", default="L10.8")
    parser.add_argument("--check-runs", type=int, default=5)
    parser.add_argument("--mutant-runs", type=int, default=3)
    parser.add_argument("--pitfall", default="s06", help="the pitfall the failing file makes (default s06)")
    args = parser.parse_args()
    catalog = tomllib.loads((ROOT / "course" / "modules" / f"{args.module}.toml").read_text())
    pitfall = next(p for p in catalog["pitfall"] if p["id"] == args.pitfall)
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="ol-bench-") as tmp:
        passing, failing, cache = Path(tmp) / "passing", Path(tmp) / "failing", Path(tmp) / "cache"
        for workspace in (passing, failing):
            (workspace / "tinyllm").mkdir(parents=True)
            for name in catalog["learner_files"]:
                shutil.copyfile(ROOT / "solutions" / "tinyllm" / name, workspace / "tinyllm" / name)
        patch = (ROOT / pitfall["mutant"]).read_text().replace("solutions/tinyllm/", "tinyllm/")
        subprocess.run(["patch", "-s", "-p1"], input=patch, text=True, cwd=failing, check=True)
        check = [timed(["check", args.module, "--ref-deps"], passing, cache) for _ in range(args.check_runs)]
        report(f"ol check {args.module} --ref-deps, passing file", check)
        for selection in ([], ["-k", pitfall["caught_by"]]):
            shutil.rmtree(cache, ignore_errors=True)
            what = f"ol check {args.module} --ref-deps {' '.join(selection)}".rstrip()
            cold = timed(["check", args.module, "--ref-deps", *selection], failing, cache, expect=1)
            report(f"{what}, failing file ({args.pitfall}), empty answer cache", [cold])
            warm = [timed(["check", args.module, "--ref-deps", *selection], failing, cache, expect=1)
                    for _ in range(args.check_runs)]
            report(f"{what}, failing file ({args.pitfall}), diagnosis included", warm)
        mutants = [timed(["mutants", args.module], passing, cache) for _ in range(args.mutant_runs)]
        report(f"ol mutants {args.module}", mutants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
