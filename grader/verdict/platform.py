"""Entry point of the platform's grading process: ``python -m grader.verdict.platform PLATFORM --config FILE``.

The scripts ``ol export`` writes (Gradescope's ``run_autograder``, PrairieLearn's ``run.sh``) start
it inside the platform's container. It grades the submission as ``ol grade`` grades one (a
sandboxed process of its own, :mod:`grader.running.grading`) and writes the platform's
``results.json``. Every path the platform fixes can be moved with an environment variable, so the
scripts run anywhere:

| platform | submission | results | variable (default) |
| --- | --- | --- | --- |
| Gradescope | ``$D/submission/`` | ``$D/results/results.json`` | ``OL_AUTOGRADER_DIR`` (``/autograder``) |
| PrairieLearn | ``$D/student/`` | ``$D/results/results.json`` | ``OL_GRADE_DIR`` (``/grade``) |
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from grader.core.protocol import AUTOGRADER_DIR_ENV, GRADE_DIR_ENV
from grader.core.sandbox import claim, why_not_contained
from grader.core.text import readable_json
from grader.layout.catalog import Module, load_catalog
from grader.running.grading import draw_seed, grade_in_worker

PLATFORMS = ("gradescope", "prairielearn")
OUTPUT_LIMIT = 8000           # characters of one test's output the platforms show comfortably
PL_RESULTS_LIMIT = 1_000_000  # PrairieLearn refuses a larger results.json


def run_platform(platform: str, config_path: Path) -> int:
    """Grade the platform's submission folder and write its results.json; always exits 0 once written."""
    started = time.monotonic()
    config = json.loads(config_path.read_text())
    if platform == "gradescope":
        base = Path(os.environ.get(AUTOGRADER_DIR_ENV, "/autograder"))
        submission, results_path = base / "submission", base / "results" / "results.json"
    else:
        base = Path(os.environ.get(GRADE_DIR_ENV, "/grade"))
        submission, results_path = base / "student", base / "results" / "results.json"
    module = load_catalog().get(config["module"])
    box = claim(required=False)
    if not box.contained:
        # The platform's own log (hidden from students): learner code ran outside bubblewrap here.
        print(f"ol: learner code ran without bubblewrap ({why_not_contained()}), as another user where possible")
    seed = draw_seed()
    print(f"ol: cases drawn for this grading with seed {seed}")  # the platform's log, like the line above
    try:
        results = grade_in_worker(module.id, submission, submission.name, box, config.get("timeout"),
                                  float(config["limit"]), bool(config.get("hints", True)), seed=seed).results
    except Exception as err:  # ol failed, not the submission: say so rather than leave no results
        results = {"status": "error", "message": f"the grader failed: {type(err).__name__}: {err}", "tests": [],
                   "score": 0.0, "max_score": sum(t.points for t in module.tests), "hint": "", "grader_error": True}
    seconds = time.monotonic() - started
    convert = to_gradescope if platform == "gradescope" else to_prairielearn
    # A learner's message may carry bytes that are not UTF-8: escaped, so the platform can read the file.
    results = convert(readable_json(results), module, seconds)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _test_rows(results: dict, module: Module) -> list[tuple[str, float, str, str]]:
    """(name, points, status, text) for every catalog test; a test that never ran failed with the run's reason."""
    ran = {t["name"]: t for t in results.get("tests", [])}
    reason = results.get("message") or "this test did not run"
    rows = []
    for test in module.tests:
        t = ran.get(test.name)
        if t is None:
            rows.append((test.name, test.points, "fail", f"not run: {reason}"))
            continue
        text = t.get("message") or ""
        diagnosis = (t.get("diagnosis") or {}).get("summary")
        if diagnosis:
            text += f"\n\nDiagnosis: {diagnosis}"
        rows.append((test.name, test.points, t["status"], text))
    return rows


def _summary(results: dict, module: Module) -> str:
    lines = [f"{module.id} ({module.title}): {results['score']:g} of {results['max_score']:g} points."]
    if results.get("status") == "error" and results.get("message"):
        lines.append(f"Your code could not be graded as a whole: {results['message']}")
    if results.get("hint"):
        lines.append(results["hint"])
    return _clip("\n".join(lines))


def to_gradescope(results: dict, module: Module, seconds: float) -> dict:
    """Gradescope's results.json (gradescope/autograder_samples, docs/specs.md)."""
    tests = [{"name": name, "number": str(i + 1), "score": points if status == "pass" else 0.0, "max_score": points,
              "status": "passed" if status == "pass" else "failed", "output": _clip(text), "output_format": "text",
              "visibility": "visible"}
             for i, (name, points, status, text) in enumerate(_test_rows(results, module))]
    return {"score": float(sum(t["score"] for t in tests)), "execution_time": round(seconds, 2),
            "output": _summary(results, module), "output_format": "text", "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests}


def to_prairielearn(results: dict, module: Module, seconds: float) -> dict:
    """PrairieLearn's results.json (externalGrading.md): score in [0, 1]; gradable false only when
    the grader itself failed (not the student's doing, no attempt used)."""
    tests = [{"name": name, "points": points if status == "pass" else 0.0, "max_points": points,
              "message": _clip(text.split("\n", 1)[0] if text else ""), "output": _clip(text)}
             for name, points, status, text in _test_rows(results, module)]
    total = sum(t["max_points"] for t in tests)
    data = {"gradable": not results.get("grader_error"),
            "score": round(sum(t["points"] for t in tests) / total, 6) if total else 0.0,
            "message": _summary(results, module), "output": f"graded in {seconds:.1f} s", "tests": tests}
    while len(json.dumps(data)) > PL_RESULTS_LIMIT:
        for t in data["tests"]:
            t["output"] = t["output"][: len(t["output"]) // 2]
    return data


def _clip(text: str, limit: int = OUTPUT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.verdict.platform",
                                     description="Inside the platform's container: grade the submission, write results.json.")
    parser.add_argument("platform", choices=PLATFORMS)
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    return run_platform(args.platform, args.config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
