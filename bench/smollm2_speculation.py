"""Speculation on a real instruct model: SmolLM2-135M-Instruct in the course's engine.

Run through ``python bench/speculation.py --model smollm2 [--quick]``. Workloads a user would run,
each a chat turn: edit a given function (code-edit: change one default; the greedy answer is
checked against the function the edit should give), answer by quoting a passage (quote), emit a
JSON tool call that echoes its arguments (tool-call) and free chat (chat), at temperature 0 and 0.7
(``--quick``: the first code-edit prompt at temperature 0).
Configs: plain decoding in the batch-invariant engine (``none``, every pass a 16-row gemm), the
fastest plain decoding the engine can do (``one-row``: one plain gemm per matmul over the single
fed row, ``TinyLlama.batch_invariant = False``) and prompt lookup at several k.

Timings are of decoding: from the first emitted token (after the prompt's pass) to the last, as
tokens per second; each speed-up is the ratio of two such rates measured in the same repeat, the
median over interleaved repeats in one run (geometric mean over a workload's prompts). Greedy
output with prompt lookup must equal plain greedy output token for token on every workload and k:
the script exits with status 1 if it does not. It also times one pass against the number of fed
tokens (1..16) in both modes and plots it; the full run also tries other layouts of the weight
gemms (4- or 8-row gemms, a size chosen by the fed tokens) for batch invariance and cost.
"""

import json
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "solutions"))

import numpy as np  # noqa: E402

from tinyllm import smollm2  # noqa: E402
from tinyllm.model import Weight, aligned_copy, matmul  # noqa: E402
from tinyllm.runner import RunnerTarget  # noqa: E402
from tinyllm.sampling import SamplingParams  # noqa: E402
from tinyllm.spec import SpecConfig, generate_stream  # noqa: E402
from display import blas, blas_text, finish_figure, print_table  # noqa: E402

BLOCK_TOKENS = 16
POOL_BLOCKS = 64
TEMPERATURES = (0.0, 0.7)
SEED = 7
# Tokens a request may emit: a code-edit answer (the function, then a sentence about it) ends by
# itself within 192; the others are cut at 128.
MAX_NEW = {"code-edit": 192, "quote": 128, "tool-call": 128, "chat": 128}

# The code-edit workload: change one default in a given function, asked as a code editor would
# ask it. The model must really do the edit: ``edit_verdict`` checks its greedy answer against the
# function the edit should give. A 135M model does only some edits (bench/README.md lists the ones
# it ignored or rewrote); these two it does exactly.
_SETTINGS = '''def load_settings(path):
    settings = {
        "host": "localhost",
        "port": 8080,
        "debug": False,
        "workers": 4,
        "log_level": "info",
        "cache_size": 256,
    }
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings
'''
_EDITOR = {"role": "system", "content": "You edit code. Reply with the complete edited function in a "
                                        "Python code block and nothing else."}


def _edit(task: str) -> list[dict]:
    return [_EDITOR, {"role": "user", "content": "```python\n" + _SETTINGS + "```\n" + task}]


# (prompt, the given function, the function the edit should give)
EDITS = [
    (_edit("Change the default port from 8080 to 9000."), _SETTINGS,
     _SETTINGS.replace('"port": 8080', '"port": 9000')),
    (_edit("Change the default cache size from 256 to 1024."), _SETTINGS,
     _SETTINGS.replace('"cache_size": 256', '"cache_size": 1024')),
]

# Each prompt is a list of chat messages. Written for this benchmark; the first prompt of each
# workload is the one --quick runs.
WORKLOADS: dict[str, list[list[dict]]] = {
    "code-edit": [messages for messages, _, _ in EDITS],
    "quote": [
        [{"role": "user", "content": "Passage: The delivery van comes on Tuesdays and Fridays. Orders "
                                     "written before noon on the day before are packed in time; anything "
                                     "later waits for the next van. Returns go back on the same van, in "
                                     "the grey crates by the door.\n\nQuestion: When must an order be "
                                     "written to catch the van? Answer by quoting the sentence from the "
                                     "passage."}],
    ],
    "tool-call": [
        [{"role": "system", "content": "You are an assistant that calls tools. Reply with JSON only."},
         {"role": "user", "content": "Call order_part with these arguments: {\"code\": \"BR-2\", \"name\": "
                                     "\"rear brake pads\", \"count\": 6, \"supplier\": \"Velo Parts\", "
                                     "\"deliver_to\": \"Workshop 3, 14 Mill Lane\"}"}],
    ],
    "chat": [
        [{"role": "user", "content": "Give me three tips for keeping a bicycle chain clean."}],
    ],
}


@dataclass
class Run:
    tokens: list[int]
    drafted: int
    accepted: int
    passes: int
    decode_seconds: float  # first emitted token to last

    @property
    def decode_rate(self) -> float:
        return (len(self.tokens) - 1) / self.decode_seconds if len(self.tokens) > 1 else float("nan")


def run_once(m: smollm2.SmolLM2, prompt: list[int], config: str, k: int, temperature: float,
             max_new: int) -> Run:
    """One request; ``config`` is ``none``, ``one-row`` or ``prompt_lookup``."""
    model = m.model
    model.batch_invariant = config != "one-row"
    try:
        target = RunnerTarget(model, model.new_pool(POOL_BLOCKS, BLOCK_TOKENS))
        cfg = SpecConfig.parse("prompt_lookup" if config == "prompt_lookup" else "none", k)
        stamps: list[float] = []

        def on_token(token: int, logprob: float) -> bool:
            stamps.append(time.perf_counter())
            return True

        out = generate_stream(target, cfg, prompt, SamplingParams(temperature=temperature), SEED,
                              max_new, [m.eos], on_token)
    finally:
        model.batch_invariant = True
    s = out.stats
    return Run(out.tokens, s.drafted, s.accepted, s.target_calls, stamps[-1] - stamps[0])


def formula(a: float, k: int) -> float:
    """Expected tokens per round when each draft token is accepted with probability ``a``."""
    return float(k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


def measure(m: smollm2.SmolLM2, workloads: dict, temperatures: dict[float, int],
            ks: list[int]) -> tuple[list[dict], list[str], dict[str, list[str]]]:
    """Rows of the table, the greedy mismatches (empty when greedy output is identical) and each
    workload's plain greedy answers."""
    configs = [("none", 1), ("one-row", 1)] + [("prompt_lookup", k) for k in ks]
    runs: dict[tuple, list[Run]] = {}
    for t, repeats in temperatures.items():
        for rep in range(repeats):
            for name, prompts in workloads.items():
                for p, messages in enumerate(prompts):
                    ids = m.chat(messages)
                    shift = rep % len(configs)  # no config always first (cold caches) or last
                    for config, k in configs[shift:] + configs[:shift]:
                        run = run_once(m, ids, config, k, t, MAX_NEW[name])
                        runs.setdefault((name, p, t, config, k), []).append(run)
    mismatches = greedy_mismatches(m, runs)
    rows = []
    for name, prompts in workloads.items():
        for t in temperatures:
            def geomean_over_prompts(value):
                return math.exp(statistics.mean(math.log(value(p)) for p in range(len(prompts))))

            def rate(config, k):
                """Median decoding rate over the repeats, geometric mean over the prompts."""
                return geomean_over_prompts(
                    lambda p: statistics.median(r.decode_rate for r in runs[(name, p, t, config, k)]))

            def speedup(config, k, base):
                """Median over the repeats of this config's rate over ``base``'s in the same repeat
                (a busy spell on the shared machine slows both), geometric mean over the prompts."""
                return geomean_over_prompts(lambda p: statistics.median(
                    r.decode_rate / b.decode_rate
                    for r, b in zip(runs[(name, p, t, config, k)], runs[(name, p, t, base, 1)])))

            for config, k in configs:
                per = [runs[(name, p, t, config, k)][0] for p in range(len(prompts))]
                tokens = sum(len(r.tokens) for r in per)
                drafted = sum(r.drafted for r in per)
                accepted = sum(r.accepted for r in per)
                passes = sum(r.passes for r in per)
                a = accepted / drafted if drafted else 0.0
                rows.append({
                    "workload": name, "temperature": t, "config": config,
                    "k": k if config == "prompt_lookup" else 0, "tokens": tokens, "passes": passes,
                    "accept_rate": a, "tokens_per_pass": tokens / passes,
                    "formula": formula(a, k) if drafted else 1.0, "decode_tokens_per_s": rate(config, k),
                    "speedup_vs_plain": speedup(config, k, "none"),
                    "speedup_vs_one_row": speedup(config, k, "one-row"),
                })
    answers = {name: [m.decode(runs[(name, p, 0.0, "none", 1)][0].tokens) for p in range(len(prompts))]
               for name, prompts in workloads.items()} if 0.0 in temperatures else {}
    return rows, mismatches, answers


def edit_verdict(answer: str, given: str, expected: str) -> str:
    """What an answer did with its edit: the first code block against the function the edit should give."""
    block = re.search(r"```(?:python)?\n(.*?)```", answer, re.S)
    if block is None:
        return "no code block"
    if block.group(1) == expected:
        return "exact edit"
    if block.group(1) == given:
        return "edit ignored (copied unchanged)"
    return "not the requested edit"


def greedy_mismatches(m: smollm2.SmolLM2, runs: dict[tuple, list[Run]]) -> list[str]:
    out = []
    for (name, p, t, config, k), rs in runs.items():
        if t != 0.0 or config == "one-row":
            continue
        plain = runs[(name, p, t, "none", 1)][0].tokens
        for r in rs:
            if r.tokens != plain:
                at = next((i for i, (x, y) in enumerate(zip(plain, r.tokens)) if x != y),
                          min(len(plain), len(r.tokens)))
                out.append(f"{name} prompt {p}, {config} k={k}: differs from plain greedy at token {at}: "
                           f"{m.decode(plain[at:at + 8])!r} vs {m.decode(r.tokens[at:at + 8])!r}")
                break
    return out


def pass_cost(m: smollm2.SmolLM2, context: int, repeats: int) -> dict[str, list[float]]:
    """Median milliseconds of one ``RunnerTarget.extend`` of n = 1..16 ids after ``context`` cached
    positions, in the batch-invariant engine and with plain gemms over exactly the fed rows."""
    model = m.model
    target = RunnerTarget(model, model.new_pool(POOL_BLOCKS, BLOCK_TOKENS))
    target.extend([(7 * i) % 4000 + 100 for i in range(context)])
    out: dict[str, list[list[float]]] = {"batch-invariant": [[] for _ in range(16)],
                                         "plain gemm": [[] for _ in range(16)]}
    try:
        for _ in range(repeats):
            for mode, invariant in (("batch-invariant", True), ("plain gemm", False)):
                model.batch_invariant = invariant
                for n in range(1, 17):
                    began = time.perf_counter()
                    target.extend(list(range(500, 500 + n)))
                    out[mode][n - 1].append((time.perf_counter() - began) * 1e3)
                    target.truncate(context)
    finally:
        model.batch_invariant = True
    return {mode: [statistics.median(ts) for ts in per_n] for mode, per_n in out.items()}


def _gemm_blocks(model, rows_for):
    """A ``_matmul`` for ``model`` that runs each weight matmul as gemms of ``rows_for(n)`` rows
    over all its columns (``n`` the fed rows, zero-padded to whole gemms); attention keeps the
    engine's layout."""
    def block_matmul(a: np.ndarray, b, rows: np.ndarray) -> np.ndarray:
        if not isinstance(b, Weight):
            return matmul(a, b, rows)
        size = rows_for(a.shape[0])
        gemms = -(-a.shape[0] // size)
        padded = np.zeros((gemms * size, a.shape[1]), dtype=np.float32)
        padded[:a.shape[0]] = a
        out = aligned_copy(padded).reshape(gemms, size, -1) @ b.matrix
        return out.reshape(gemms * size, -1)[:a.shape[0]]
    return block_matmul


def layouts(m: smollm2.SmolLM2, context: list[int], repeats: int) -> list[dict]:
    """Candidate layouts for the passes' weight gemms: is every row of a pass over 2..16 fed tokens
    bitwise the row a one-token pass gives (batch invariance), and what does a pass cost?"""
    model = m.model
    candidates = {
        "column-block gemms, rows as fed where probed free (the engine)": None,
        "16-row gemms over all columns": _gemm_blocks(model, lambda n: 16),
        "4-row gemms": _gemm_blocks(model, lambda n: 4),
        "8-row gemms": _gemm_blocks(model, lambda n: 8),
        "4, 8 or 16 rows by fed tokens": _gemm_blocks(model, lambda n: 4 if n <= 4 else 8 if n <= 8 else 16),
        "plain gemm (one-row mode)": "plain",
    }
    fed = list(range(600, 616))
    out = []
    for name, layout in candidates.items():
        model.batch_invariant = layout != "plain"
        if callable(layout):
            model._matmul = layout
        try:
            target = RunnerTarget(model, model.new_pool(POOL_BLOCKS, BLOCK_TOKENS))
            target.extend(context)
            alone = []
            for token in fed:
                alone.append(target.extend([token])[0])
            invariant = True
            for n in (2, 4, 5, 8, 12, 16):
                target.truncate(len(context))
                rows = target.extend(fed[:n])
                invariant &= all(np.array_equal(r, a) for r, a in zip(rows, alone))
            ms = {}
            for n in (1, 4, 8, 16):
                times = []
                for _ in range(repeats):
                    target.truncate(len(context))
                    began = time.perf_counter()
                    target.extend(fed[:n])
                    times.append((time.perf_counter() - began) * 1e3)
                ms[n] = statistics.median(times)
        finally:
            model.batch_invariant = True
            model.__dict__.pop("_matmul", None)
        out.append({"layout": name, "batch_invariant": bool(invariant), "ms_by_fed": ms})
    return out


def print_rows(rows: list[dict]) -> None:
    head = (f"{'workload':10} {'T':>3} {'config':13} {'k':>2} {'tokens':>6} {'passes':>6} {'accept':>6} "
            f"{'tok/pass':>8} {'formula':>7} {'tok/s':>6} {'vs plain':>8} {'vs 1-row':>8}")
    print_table(head, (f"{r['workload']:10} {r['temperature']:>3} {r['config']:13} {r['k']:>2} {r['tokens']:6d} "
                       f"{r['passes']:6d} {r['accept_rate']:6.2f} {r['tokens_per_pass']:8.2f} {r['formula']:7.2f} "
                       f"{r['decode_tokens_per_s']:6.1f} {r['speedup_vs_plain']:7.2f}x "
                       f"{r['speedup_vs_one_row']:7.2f}x" for r in rows))


def best_code_edit(rows: list[dict]) -> dict:
    spec = [r for r in rows if r["workload"] == "code-edit" and r["temperature"] == 0.0
            and r["config"] == "prompt_lookup"]
    return max(spec, key=lambda r: r["speedup_vs_plain"])


def plot(rows: list[dict], cost: dict[str, list[float]], ks: list[int], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    fed = list(range(1, 17))
    for mode, ms in cost.items():
        left.plot(fed, ms, "o-", label=mode)
    left.set(xlabel="fed tokens in the pass", ylabel="ms per pass", ylim=(0, None),
             title="SmolLM2-135M: cost of one pass")
    left.legend(fontsize=8)
    for i, name in enumerate(dict.fromkeys(r["workload"] for r in rows)):
        pl = [r for r in rows if r["workload"] == name and r["temperature"] == 0.0
              and r["config"] == "prompt_lookup"]
        mid.plot(ks, [r["tokens_per_pass"] for r in pl], "o-", color=f"C{i}", label=f"{name}: measured")
        mid.plot(ks, [r["formula"] for r in pl], ":", color=f"C{i}", label=f"{name}: (1-a^(k+1))/(1-a)")
        right.plot(ks, [r["speedup_vs_plain"] for r in pl], "o-", color=f"C{i}", label=f"{name}: vs plain")
        right.plot(ks, [r["speedup_vs_one_row"] for r in pl], "x--", color=f"C{i}", alpha=0.7,
                   label=f"{name}: vs one-row")
    mid.set(xlabel="k (draft length)", ylabel="tokens per target pass", title="Prompt lookup, T = 0")
    right.axhline(1.0, color="grey", lw=0.8)
    right.set(xlabel="k (draft length)", ylabel="decoding speed-up", title="Speed-up, T = 0")
    finish_figure(fig, path, mid, right)


def main(quick: bool, out: Path) -> int:
    began = time.perf_counter()
    try:
        m = smollm2.load()
    except smollm2.RealModelMissing as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    loaded = time.perf_counter() - began
    kernels = blas(m.model)
    print(blas_text(kernels))
    if quick:
        workloads = {"code-edit": WORKLOADS["code-edit"][:1]}
        temperatures, ks, cost_repeats = {0.0: 2}, [4, 8, 12], 3
    else:
        workloads = WORKLOADS
        temperatures, ks, cost_repeats = {0.0: 3, 0.7: 1}, [1, 2, 4, 8, 12, 15], 5
    rows, mismatches, answers = measure(m, workloads, temperatures, ks)
    print_rows(rows)
    verdicts = [edit_verdict(answer, given, expected)
                for answer, (_, given, expected) in zip(answers["code-edit"], EDITS)]
    print("\ncode-edit, greedy answers: " + "; ".join(f"prompt {p}: {v}" for p, v in enumerate(verdicts)))
    context = len(m.chat(WORKLOADS["code-edit"][0])) + 32
    cost = pass_cost(m, context, cost_repeats)
    print(f"\none pass after {context} cached positions, ms by fed tokens 1..16:")
    for mode, ms in cost.items():
        print(f"  {mode:16} " + " ".join(f"{x:5.0f}" for x in ms))
    print("  ratio to one fed token (batch-invariant): "
          + " ".join(f"{x / cost['batch-invariant'][0]:.2f}" for x in cost["batch-invariant"]))
    print("  ratio to one fed token (plain gemm):      "
          + " ".join(f"{x / cost['plain gemm'][0]:.2f}" for x in cost["plain gemm"]))
    probed = [] if quick else layouts(m, m.chat(WORKLOADS["code-edit"][0]), cost_repeats)
    if probed:
        print("\nlayouts of the weight gemms: every row bitwise the row of a one-token pass? "
              "ms by fed tokens 1, 4, 8, 16:")
        for r in probed:
            print(f"  {r['layout']:44} {'invariant' if r['batch_invariant'] else 'NOT invariant':13} "
                  + " ".join(f"{x:5.0f}" for x in r["ms_by_fed"].values()))
    best = best_code_edit(rows)
    report = {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to float32)", "blas": kernels, "quick": quick,
              "ks": ks, "temperatures": {str(t): n for t, n in temperatures.items()}, "max_new": MAX_NEW,
              "load_seconds": loaded, "seconds": time.perf_counter() - began, "pass_cost_ms": cost,
              "pass_cost_context": context, "greedy_mismatches": mismatches, "best_code_edit": best,
              "code_edit_verdicts": verdicts, "greedy_answers": answers, "layouts": probed,
              "rows": rows}
    (out / "smollm2_speculation.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(rows, cost, ks, out / "smollm2_speculation.png")
    print(f"wrote {out / 'smollm2_speculation.json'} and {out / 'smollm2_speculation.png'} "
          f"({report['seconds']:.0f} s, model loaded in {loaded:.1f} s)")
    if mismatches:
        print("FAIL: greedy output with prompt lookup differs from plain greedy:", file=sys.stderr)
        for line in mismatches:
            print("  " + line, file=sys.stderr)
    print(f"smollm2 code-edit: best speed-up {best['speedup_vs_plain']:.2f}x at k={best['k']} "
          f"(tokens/pass {best['tokens_per_pass']:.2f}); vs one-row decoding {best['speedup_vs_one_row']:.2f}x; "
          + ("greedy identical" if not mismatches else "greedy DIFFERS"))
    return 1 if mismatches else 0
