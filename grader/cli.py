"""The ``ol`` command: parses arguments and calls one function per verb. Defaults live in those functions."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

from grader.core.errors import OlError

DESCRIPTION = """ol grades the course's modules.

Learner:    ol list; ol start L10.8; ol tests L10.8; ol check L10.8 [--ref-deps]; ol diff L10.8
            ol lab (the chapter notebooks in JupyterLab, running your workspace)
Instructor: ol mutants L10.8 (every named pitfall must be caught by its named test)
            ol stubs (course/stubs/ written from the reference's # BEGIN SOLUTION markers)

The workspace is the folder holding your tinyllm/ package: the current folder, or --workspace DIR,
or the OL_WORKSPACE environment variable."""

CHECK_EPILOG = """A failing test names its first failing case: the call that reproduces it, the expected answer,
yours, where they part, and the card's rule.

Hints: when tests fail on an assertion, ol compares those tests' answers, case by case, with the
reference's and every named pitfall's (each pitfall is a known mistake, kept as a patch on the
reference). A hint names a pitfall only when it gives your answer on every case of a failing test
(where yours differs from the reference's and where yours is right; an exception only with the same
type and message; for the statistical tests, counts a chi-square test cannot tell apart), the
reference's on the other failing tests, and the matched cases differ in more than true/false
values; so it holds with -k and for a single test. When none does, ol says it is not a named
pitfall and shows the first differing case. The reference's and pitfalls' answers are computed once
and cached (OL_CACHE_DIR, default ~/.cache/tinyllm-course/answers).

exit codes: 0 every test passed, 1 a test failed or timed out, 2 usage (unknown module,
module not started, a needed module not passing without --ref-deps), 3 the grader could not run
(a fixture that does not match its catalog entry)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ol", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--workspace", metavar="DIR", help="the folder holding your tinyllm/ (default: OL_WORKSPACE or the current folder)")

    verbs.add_parser("list", parents=[where], help="the modules, what each needs, and your status",
                     description="List the modules, what each needs, and your status at your last check.")

    start = verbs.add_parser("start", parents=[where], help="write a module's stubs into your tinyllm/",
                             description="Write the module's stubs into your tinyllm/. Never overwrites your files.")
    start.add_argument("module", help="a module id, e.g. L10.8")
    start.add_argument("--force", action="store_true", help="replace your files with fresh stubs, keeping a timestamped backup in .ol/backups/")

    tests = verbs.add_parser("tests", parents=[where], help="a module's graded tests: kind, what each checks, why it matters",
                             description="Show a module's graded tests and the pitfalls they catch, with how each did at "
                                         "your last ol check of the module.")
    tests.add_argument("module", help="a module id, e.g. L10.8")

    check = verbs.add_parser("check", parents=[where], help="run a module's graded tests on your code (exit code is the verdict)",
                             description="Run the module's graded tests in a separate process against your files.",
                             epilog=CHECK_EPILOG)
    check.add_argument("module", help="a module id, e.g. L10.8")
    check.add_argument("--ref-deps", action="store_true", help="take the modules this one needs from the reference, not your workspace")
    check.add_argument("-k", dest="keyword", metavar="EXPR", help="run only the tests whose names match EXPR (pytest's -k)")
    check.add_argument("--timeout", type=float, metavar="S", help="seconds each test may run (default: the module's, from its catalog)")
    check.add_argument("--json", dest="json_path", metavar="FILE", help="also write per-test results to FILE (format: grader/README.md)")
    check.add_argument("-v", "--verbose", action="store_true", help="also print pytest's full report of each failure")
    check.add_argument("--isolate", action="store_true", help="run your code in a sandboxed process of its own, as ol grade does "
                                                               "(slower; a verdict the code under test cannot forge; "
                                                               "the modules this one needs come from the reference)")

    diff = verbs.add_parser("diff", parents=[where], help="the first cases where your answers differ from the reference's",
                            description="For each graded test (or those -k selects), show the first cases where your answers and the "
                                        "reference's part: the call that reproduces the case, both answers, and where they part. "
                                        "A function you have not written yet is one line.")
    diff.add_argument("module", help="a module id, e.g. L10.8")
    diff.add_argument("--ref-deps", action="store_true", help="take the modules this one needs from the reference")
    diff.add_argument("--cases", type=int, default=3, metavar="N", help="differing cases to show per test (default 3)")
    diff.add_argument("-k", dest="keyword", metavar="EXPR", help="only the tests whose names match EXPR (pytest's -k)")

    lab = verbs.add_parser("lab", parents=[where], help="open the chapter notebooks in JupyterLab, running your workspace",
                           description="Start JupyterLab on the course's notebooks/ with OL_WORKSPACE set to your workspace "
                                       "(without --workspace or OL_WORKSPACE: the current folder if the module is started "
                                       "there, else the workspace ol start remembered).")
    lab.add_argument("--dry-run", action="store_true", help="print the jupyter lab command instead of running it")
    lab.add_argument("jupyter_args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                     help="arguments after -- go to jupyter lab, e.g. -- --no-browser --port 8899")

    shell = verbs.add_parser("shell", parents=[where], help="a Python prompt where every call ol prints can be pasted",
                             description="Start Python on the package ol check runs (your files, the reference's given "
                                         "files), with numpy, every tinyllm module, the fake targets and the graded "
                                         "suite's helpers imported: paste any failing case's call.")
    shell.add_argument("module", help="a module id, e.g. L10.8")
    shell.add_argument("--ref-deps", action="store_true", help="take the modules this one needs from the reference")
    shell.add_argument("-c", dest="command", metavar="CODE", help="run CODE instead of an interactive prompt")

    stubs = verbs.add_parser("stubs", help="for instructors: write course/stubs/ from the reference's markers",
                             description="Write each learner file's stub from solutions/tinyllm/: the bodies between "
                                         "# BEGIN SOLUTION and # END SOLUTION become a NotImplementedError naming the "
                                         "card section (grader/layout/stubs.py states the markers).")
    stubs.add_argument("module", nargs="?", default="all", help="a module id, or 'all' (the default)")
    stubs.add_argument("--check", action="store_true", help="write nothing; exit 1 if a stub is not what the reference makes")

    mutants = verbs.add_parser("mutants", help="for instructors: prove each named pitfall is caught by its named test",
                               description="Apply each named pitfall's mutant to a copy of the reference, run the graded "
                                           "suite, and print the kill matrix. Exit 1 if a mutant survives or escapes its named test.")
    mutants.add_argument("module", help="a module id, or 'all'")
    mutants.add_argument("--jobs", type=int, default=2, metavar="N", help="mutants run at once (default 2)")

    grade = verbs.add_parser("grade", help="for instructors: grade a class's submissions into grades.csv",
                             description="Grade submissions (folders or zip files holding tinyllm/), several at a time, "
                                         "each in a sandboxed process of its own; write grades.csv and one JSON per "
                                         "submission. Each module is graded alone: the modules it needs come from the "
                                         "reference. Submissions are never modified.")
    grade.add_argument("module", help="a module id, e.g. L10.8")
    grade.add_argument("submissions", nargs="+", metavar="SUBMISSION", help="a folder or a zip file holding tinyllm/")
    grade.add_argument("--jobs", type=int, default=2, metavar="N", help="submissions graded at once (default 2)")
    grade.add_argument("--out", metavar="DIR", help="where grades.csv and the JSON files go (default ./grades)")
    grade.add_argument("--timeout", type=float, metavar="S", help="CPU seconds the learner's code may use in each test (default: 10 times the reference's time for that test here, at least 2 s, at most the module's); on the clock, twice that")
    grade.add_argument("--limit", type=float, metavar="S", help="CPU seconds the learner's code may use in one submission's whole check (default: 4 times the reference's check, 30 to 60); on the clock, twice that")
    grade.add_argument("--seed", type=int, metavar="N", help="the seed of the cases the grading draws, which no submission can know ahead (default: a fresh one, printed and written in each JSON); the same seed grades the same again")
    grade.add_argument("--no-hints", action="store_true", help="no pitfall hints (skips computing the pitfalls' answers to the cases this grading draws)")
    grade.add_argument("--unsandboxed", action="store_true", help="grade without bubblewrap, where it cannot be installed: learner code then runs with limits only, and each submission's results say so")

    export = verbs.add_parser("export", help="for instructors: a module's autograder for Gradescope or PrairieLearn",
                              description="Write a Gradescope autograder zip (setup.sh, run_autograder) or a PrairieLearn "
                                          "external-grader folder (run.sh) that grades one submission as ol grade does and "
                                          "writes the platform's results.json. See grader/README.md.")
    export.add_argument("platform", choices=["gradescope", "prairielearn"])
    export.add_argument("module", help="a module id, e.g. L10.8")
    export.add_argument("--out", metavar="PATH", help="the zip (Gradescope) or folder (PrairieLearn) to write")
    export.add_argument("--timeout", type=float, metavar="S", help="seconds each test may run (default: the module's)")
    export.add_argument("--limit", type=float, metavar="S", help="seconds the whole check may run (default 60; PrairieLearn 20)")
    export.add_argument("--no-hints", action="store_true", help="no pitfall hints (skips computing the pitfalls' answers now)")
    return parser


def dispatch(args: argparse.Namespace) -> int:
    if args.verb == "list":
        from grader.commands.list import list_modules
        return list_modules(args.workspace)
    if args.verb == "start":
        from grader.commands.start import start
        return start(args.module, args.workspace, args.force)
    if args.verb == "tests":
        from grader.commands.tests import show_tests
        return show_tests(args.module, args.workspace)
    if args.verb == "check":
        from grader.commands.check import check
        return check(args.module, args.workspace, args.ref_deps, args.keyword, args.timeout, args.json_path,
                     args.verbose, args.isolate)
    if args.verb == "shell":
        from grader.commands.shell import shell
        return shell(args.module, args.workspace, args.ref_deps, args.command)
    if args.verb == "diff":
        from grader.commands.diff import diff
        return diff(args.module, args.workspace, args.ref_deps, args.cases, args.keyword)
    if args.verb == "lab":
        from grader.commands.lab import lab
        return lab(args.workspace, args.jupyter_args, args.dry_run)
    if args.verb == "grade":
        from grader.commands.grade import grade
        return grade(args.module, args.submissions, args.jobs, args.out, args.timeout, args.limit, args.unsandboxed,
                     args.seed, not args.no_hints)
    if args.verb == "export":
        from grader.commands.export import export
        return export(args.platform, args.module, args.out, args.timeout, args.limit, not args.no_hints)
    if args.verb == "stubs":
        from grader.commands.stubs import stubs
        return stubs(args.module, args.check)
    from grader.commands.mutants import mutants
    return mutants(args.module, args.jobs)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Terminated like interrupted: unwind, so the test processes ol started are stopped too.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return dispatch(args)
    except OlError as err:
        sys.stdout.flush()
        print(f"ol: {err}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:
        # The reader (``ol tests | head``) left; say nothing more to it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        run = sys.modules.get("grader.running.run")    # imported by the verbs that start test processes
        if run is not None:
            run.stop_all()
        print("ol: interrupted", file=sys.stderr)
        return 130
    except Exception:
        sys.stdout.flush()
        traceback.print_exc()
        print("ol: internal error (the traceback above is a bug in ol, not in your code)", file=sys.stderr)
        return 3
