"""L10.8's differential tests, case by case (see the package docstring)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.diff_adapters import Case, Differ, load_json, short

GOLDEN = "fixtures/L10.8/spec_golden.json"


def _lookup_cases(root: Path) -> list[Case]:
    return [Case(c["name"], f"ctx={short(c['ctx'])} k={c['k']} max_ngram={c['max_ngram']} min_ngram={c['min_ngram']}", c)
            for c in load_json(root, GOLDEN)["prompt_lookup"]]


def _lookup_answer(case: dict) -> list[int]:
    from tinyllm.spec import prompt_lookup

    return [int(t) for t in prompt_lookup(case["ctx"], case["k"], case["max_ngram"], case["min_ngram"])]


def _verify_cases(root: Path) -> list[Case]:
    cases = []
    for c in load_json(root, GOLDEN)["verify"]:
        vocab = len(c["rows"][0]) // 8
        probs = "with draft distributions" if c["draft_probs"] is not None else "one-hot draft"
        inputs = (f"draft={short(c['draft'])} prompt={short(c['prompt'])} output={short(c['output'])} "
                  f"params={c['params'] or 'greedy'} seed={c['seed']} {len(c['rows'])} rows x {vocab} ids, {probs}")
        cases.append(Case(c["name"], inputs, c))
    return cases


def _verify_answer(case: dict) -> dict:
    from tinyllm.sampling import SamplingParams, stream
    from tinyllm.spec import verify_draft

    rows = [np.frombuffer(bytes.fromhex(r), dtype="<f4").copy() for r in case["rows"]]
    probs = None if case["draft_probs"] is None else [np.frombuffer(bytes.fromhex(q), dtype="<f8").copy()
                                                      for q in case["draft_probs"]]
    rng = stream(case["seed"])
    v = verify_draft(rows, case["draft"], probs, SamplingParams(**case["params"]), case["prompt"], case["output"], rng)
    return {"tokens": [int(t) for t in v.tokens], "n_accepted": int(v.n_accepted), "next_u32": rng.next_u32(),
            "logprobs": [float(x) for x in v.logprobs]}


GEN_PROMPTS = [[1, 2, 3, 4, 5, 6], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [7, 7, 2, 7, 7, 2, 7, 7, 2]]


def _greedy_cases(root: Path) -> list[Case]:
    return [Case(f"{draft}-{i}", f"prompt={short(p)} draft={draft} k=4 max_new=40, the fake table target (seed 1)",
                 {"prompt": p, "draft": draft}) for i, p in enumerate(GEN_PROMPTS) for draft in ("none", "ngram", "prompt_lookup")]


def _greedy_answer(case: dict) -> dict:
    from fakes import TableTarget
    from tinyllm.sampling import SamplingParams
    from tinyllm.spec import SpecConfig, generate

    target = TableTarget(12, seed=1)
    g = generate(target, SpecConfig.parse(case["draft"], 4), case["prompt"], SamplingParams(), 0, 40, [])
    return {"tokens": [int(t) for t in g.tokens], "cached": target.cached()}


DIFFERS = {
    "prompt_lookup_matches_python_l8_6": Differ(_lookup_cases, _lookup_answer),
    "verify_matches_python_l8_6": Differ(_verify_cases, _verify_answer),
    "greedy_spec_equals_greedy_without_spec": Differ(_greedy_cases, _greedy_answer),
}
