"""L10.1's differential tests, case by case (see the package docstring)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.diff_adapters import Case, Differ, load_json, short

GOLDEN = "fixtures/L10.1/sampler_golden.json"


def _pcg_cases(root: Path) -> list[Case]:
    return [Case(f"seed {c['seed']} stream {c['stream']}", f"Pcg32({c['seed']}, {c['stream']}): "
                 f"{len(c['u32'])} next_u32 then {len(c['f64'])} next_f64", c) for c in load_json(root, GOLDEN)["pcg32"]]


def _pcg_answer(case: dict) -> dict:
    from tinyllm.pcg32 import Pcg32

    rng = Pcg32(case["seed"], case["stream"])
    u32 = [int(rng.next_u32()) for _ in case["u32"]]
    return {"u32": u32, "f64": [float(rng.next_f64()) for _ in case["f64"]]}


def _sampler_cases(root: Path) -> list[Case]:
    return [Case(f"case {c['id']} ({c['kind']})", f"logits={short(c['logits'], 8)} params={c['params']} "
                 f"prompt={short(c['prompt'], 8)} output={short(c['output'], 8)} seed={c['seed']} skip={c['skip']}", c)
            for c in load_json(root, GOLDEN)["sampling"]]


def _sampler_answer(case: dict) -> dict:
    from tinyllm.sampling import SamplingParams, distribution, sample, stream

    logits = np.array(case["logits"], dtype=np.float32)
    params = SamplingParams(**case["params"])
    dist = distribution(logits, params, case["prompt"], case["output"])
    rng = stream(case["seed"])
    for _ in range(case["skip"]):
        rng.next_u32()
    token, logprob = sample(logits, params, case["prompt"], case["output"], rng)
    return {"distribution": [float(x) for x in dist], "token": int(token), "logprob": float(logprob),
            "next_u32": int(rng.next_u32())}


DIFFERS = {
    "pcg32_matches_golden_streams": Differ(_pcg_cases, _pcg_answer),
    "sampler_matches_golden": Differ(_sampler_cases, _sampler_answer),
}
