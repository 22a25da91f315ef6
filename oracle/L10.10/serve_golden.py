"""Write fixtures/L10.10/serve_golden.json from the reference package (solutions/tinyllm).

    python oracle/L10.10/serve_golden.py --out fixtures/L10.10/serve_golden.json

One list of cases:
  adaptive   160 calls of adaptive_ks(lanes, cost), each {name, lanes: [[start, fixed, cap, rates]],
             cost: [block_seconds, row_seconds, request_seconds, draft_seconds], expect: ks}: 1 to 20
             requests at random positions (some still feeding a prompt), or every fifth 14 to 32 on
             consecutive slots (a busy pass), caps 0 to 15, acceptance
             estimates flat, falling or random; cost tables from gemm-bound (a second gemm as dear as
             the first) to overhead-bound (gemms almost free, requests dear).
Rates are rounded to 4 decimals, seconds to 6, before the reference answers, the list comes from a seeded numpy
generator and the JSON is written with sorted keys and a fixed layout, so a second run writes the
same bytes."""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "solutions"))

from tinyllm.serve import MAX_DRAFT, CostTable, Lane, adaptive_ks  # noqa: E402


def r6(x) -> float:
    return round(float(x), 6)


def r4(x) -> float:
    return round(float(x), 4)


def rates(rng: np.random.Generator) -> list[float]:
    kind = rng.integers(3)
    if kind == 0:
        return [r4(rng.uniform(0.05, 0.95))] * MAX_DRAFT
    if kind == 1:
        top = rng.uniform(0.5, 0.98)
        return [r4(top * 0.93 ** j) for j in range(MAX_DRAFT)]
    return [r4(v) for v in rng.uniform(0.0, 1.0, MAX_DRAFT)]


def cost(rng: np.random.Generator) -> list:
    first = rng.uniform(0.5e-3, 0.12)
    steps = rng.uniform(0.05, 1.2, 3) * first
    blocks = [r6(v) for v in np.cumsum([first, *steps])]
    return [blocks, r6(rng.uniform(0, 0.02) * first), r6(rng.uniform(0, 0.4) * first / 16),
            r6(rng.uniform(0, 0.01) * first)]


def build() -> dict:
    rng = np.random.default_rng(1010)
    cases = []
    for i in range(160):
        if i % 5 == 4:  # a busy pass: 14 to 32 requests on consecutive slots
            base, n = int(rng.integers(0, 300)), int(rng.integers(14, 33))
            lanes = [[base + j, 1, int(rng.integers(0, MAX_DRAFT + 1)), rates(rng)] for j in range(n)]
        else:
            n = int(rng.integers(1, 21))
            lanes = [[int(rng.integers(0, 300)), int(rng.integers(2, 20)) if rng.random() < 0.1 else 1,
                      int(rng.integers(0, MAX_DRAFT + 1)), rates(rng)] for _ in range(n)]
        c = cost(rng)
        ks = adaptive_ks([Lane(*lane) for lane in lanes], CostTable(tuple(c[0]), *c[1:]))
        cases.append({"name": f"step-{i:03d}", "lanes": lanes, "cost": c, "expect": ks})
    return {"adaptive": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON")
    out = parser.parse_args().out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(build(), sort_keys=True, indent=1) + "\n")


if __name__ == "__main__":
    main()
