"""Median wall times of ``ol check L10.8 --ref-deps`` on the reference and of ``ol mutants L10.8``.

    python bench/grader_timing.py [--check-runs 5] [--mutant-runs 3] [--module L10.8]

Each run is the real command in a fresh temporary workspace holding the reference's learner files.
"""

from __future__ import annotations

import argparse
import os
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


def timed(args: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([*ol(), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"ol {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return elapsed


def report(label: str, times: list[float]) -> None:
    shown = ", ".join(f"{t:.2f}" for t in times)
    print(f"{label}: median {statistics.median(times):.2f} s over {len(times)} runs ({shown})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", default="L10.8")
    parser.add_argument("--check-runs", type=int, default=5)
    parser.add_argument("--mutant-runs", type=int, default=3)
    args = parser.parse_args()
    catalog = tomllib.loads((ROOT / "course" / "modules" / f"{args.module}.toml").read_text())
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="ol-bench-") as tmp:
        workspace = Path(tmp)
        (workspace / "tinyllm").mkdir()
        for name in catalog["learner_files"]:
            shutil.copyfile(ROOT / "solutions" / "tinyllm" / name, workspace / "tinyllm" / name)
        check = [timed(["check", args.module, "--ref-deps"], workspace) for _ in range(args.check_runs)]
        report(f"ol check {args.module} --ref-deps", check)
        mutants = [timed(["mutants", args.module], workspace) for _ in range(args.mutant_runs)]
        report(f"ol mutants {args.module}", mutants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
