"""Write the L10.1 golden fixture from the reference: PCG32 streams and sampler cases.

    python oracle/L10.1/sampler_golden.py --out fixtures/L10.1/sampler_golden.json

Every case is derived from one fixed PCG32 stream, and the file is written with sorted keys, one
record per line, so running this again reproduces the fixture byte for byte. Logits are float32
values written in their shortest round-tripping decimal form, so reading them back as float32 is
exact.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(ROOT / "oracle"))

import numpy as np  # noqa: E402

from tinyllm.pcg32 import Pcg32  # noqa: E402
from tinyllm.sampling import SamplingParams, distribution, sample, stream  # noqa: E402

from golden import write_main  # noqa: E402

CASES = 120
KINDS = ("greedy", "temperature", "top_k", "top_p", "min_p", "everything")
TEMPERATURES = (0.3, 0.7, 1.0, 1.3, 2.0)
TOP_P = (0.3, 0.5, 0.8, 0.9, 0.95)
MIN_P = (0.02, 0.05, 0.1, 0.3, 0.6)
REPETITION = (1.0, 1.1, 1.3, 0.8, 2.0)
PRESENCE = (0.0, 0.5, -0.3, 1.0)
FREQUENCY = (0.0, 0.2, 0.7, -0.1)
PCG_SEEDS = ((0, 0), (1, 1), (42, 54), (42, 55), (2**32 - 1, 54), (2**32, 7), (2**63, 2**63 - 1),
             (2**64 - 1, 2**64 - 1))


class Picker:
    """Choices drawn from a fixed PCG32 stream."""

    def __init__(self) -> None:
        self.rng = Pcg32(20261129, 101)

    def below(self, n: int) -> int:
        return self.rng.next_u32() % n

    def choice(self, options):
        return options[self.below(len(options))]

    def unit(self) -> float:
        return self.rng.next_u32() / 2**32

    def seed64(self) -> int:
        return (self.rng.next_u32() << 32) | self.rng.next_u32()


def exact32(values: np.ndarray) -> list[float]:
    """float32 values as the shortest decimals that read back as the same float32."""
    out = [float(str(v)) for v in values]
    assert np.array_equal(np.array(out, dtype=np.float32), values)
    return out


def make_logits(pick: Picker, vocab: int) -> np.ndarray:
    style = pick.below(3)
    if style == 0:  # smooth, a sum of uniforms at one of three scales
        scale = pick.choice((1.0, 3.0, 8.0))
        raw = [scale * (sum(pick.unit() for _ in range(4)) - 2.0) for _ in range(vocab)]
    elif style == 1:  # a half-unit grid, so ties are common
        raw = [(pick.below(17) - 8) / 2 for _ in range(vocab)]
    else:  # all negative, where a wrong repetition penalty shows
        raw = [-0.25 - 6.0 * pick.unit() for _ in range(vocab)]
    return np.array(raw, dtype=np.float32)


def make_ids(pick: Picker, logits: np.ndarray, most: int) -> list[int]:
    """Token ids biased toward the top logits, so penalties change what is sampled."""
    top = [int(i) for i in np.argsort(-logits, kind="stable")[:3]]
    ids = []
    for _ in range(pick.below(most + 1)):
        ids.append(pick.choice(top) if pick.below(2) else pick.below(len(logits)))
    return ids


def make_params(pick: Picker, kind: str, vocab: int) -> SamplingParams:
    knobs = {"repetition_penalty": pick.choice(REPETITION), "presence_penalty": pick.choice(PRESENCE),
             "frequency_penalty": pick.choice(FREQUENCY)}
    if kind != "greedy":
        knobs["temperature"] = pick.choice(TEMPERATURES)
    if kind in ("top_k", "everything"):
        knobs["top_k"] = pick.choice((1, 2, 3, 5, 10, vocab, vocab + 5))
    if kind in ("top_p", "everything"):
        knobs["top_p"] = pick.choice(TOP_P)
    if kind in ("min_p", "everything"):
        knobs["min_p"] = pick.choice(MIN_P)
    return SamplingParams(**knobs)


def params_record(params: SamplingParams) -> dict:
    return {name: getattr(params, name) for name in params.__dataclass_fields__}


def sampling_case(pick: Picker, case_id: int) -> dict:
    kind = KINDS[case_id % len(KINDS)]
    vocab = 2 + pick.below(47)
    logits = make_logits(pick, vocab)
    prompt = make_ids(pick, logits, 12)
    output = make_ids(pick, logits, 16)
    params = make_params(pick, kind, vocab)
    seed = pick.seed64() if pick.below(4) else pick.below(1000)
    skip = pick.below(4)
    rng = stream(seed)
    for _ in range(skip):
        rng.next_u32()
    token, logprob = sample(logits, params, prompt, output, rng)
    return {"id": case_id, "kind": kind, "logits": exact32(logits), "prompt": prompt, "output": output,
            "params": params_record(params), "seed": seed, "skip": skip,
            "distribution": [float(p) for p in distribution(logits, params, prompt, output)],
            "token": token, "logprob": logprob, "next_u32": rng.next_u32()}


def pcg32_case(seed: int, stream_id: int) -> dict:
    rng = Pcg32(seed, stream_id)
    u32 = [rng.next_u32() for _ in range(16)]
    f64 = [rng.next_f64() for _ in range(4)]
    return {"seed": seed, "stream": stream_id, "u32": u32, "f64": f64}


def build() -> dict:
    pick = Picker()
    pcg = [pcg32_case(seed, stream_id) for seed, stream_id in PCG_SEEDS]
    pcg += [pcg32_case(pick.seed64(), pick.seed64()) for _ in range(4)]
    return {"pcg32": pcg, "sampling": [sampling_case(pick, i) for i in range(CASES)]}


def render(fixture: dict) -> str:
    """Sorted keys, one record per line: stable bytes and readable diffs."""
    sections = []
    for key in sorted(fixture):
        rows = ",\n".join(json.dumps(row, sort_keys=True, separators=(",", ":")) for row in fixture[key])
        sections.append(f"{json.dumps(key)}:[\n{rows}\n]")
    return "{\n" + ",\n".join(sections) + "\n}\n"


if __name__ == "__main__":
    write_main(__doc__, build, render)
