"""Token trees and a draft model on the trained tiny llama (L10.9).

Two questions, each measured in one run:

1. Trees against chains at the same budget. On the three workloads of ``bench/speculation.py``
   that repeat their prompt (code, quote, json), at temperature 0, a chain from prompt lookup and a
   suffix tree (several earlier occurrences of the suffix, merged into a trie) each feed at most
   ``k`` draft nodes plus the pending token per target pass. Reported: tokens per verifying pass
   (the prompt's own pass left out), nodes fed per pass, acceptance; which of the chain's misses a
   tree from the text could have held; and the wall-clock speed-up of both, since a tree pass costs
   more than a chain pass of as many nodes (siblings need gemms of their own).
2. The draft model at temperature 0.8 on free prose, where prompt lookup has little to copy:
   wall-clock speed-up over no speculation for the distilled draft llama
   (``fixtures/model/draft_llama.npz``) and for prompt lookup, each the sum over (prompt, seed) of
   the median of interleaved repeats, over the same sum for no speculation. Beside it, the draft's
   measured cost per proposed token against one target pass ``c``, its acceptance ``a`` and the
   predicted speed-up ``(1 - a^(k+1)) / ((1 - a)(k c + 1))``; then single passes timed alone.

Greedy output with a tree and with the draft model must equal plain greedy output on every
workload and k: the script exits with status 1 otherwise. The draft model runs its passes with
``batch_invariant = False`` (one plain gemm per matmul): a draft needs to be deterministic, not
bitwise equal across batch shapes, and that makes its pass about 40% cheaper.

    python bench/trees.py --quick        # CI, under 2 minutes
    python bench/trees.py                # more k, prompts and repeats
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread: steadier timings on a shared box

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(ROOT / "bench"))

from display import out_folder  # noqa: E402
from speculation import BLOCK_TOKENS, REPETITIVE, WEIGHTS, WORKLOADS  # noqa: E402
from tinyllm.model import TinyLlama  # noqa: E402
from tinyllm.runner import RunnerTarget  # noqa: E402
from tinyllm.sampling import SamplingParams  # noqa: E402
from tinyllm.spec import prompt_lookup  # noqa: E402
from tinyllm.trees import (DraftTree, ModelDrafter, PromptLookupDrafter, SuffixTreeDrafter,  # noqa: E402
                           generate_tree, tree_mask, tree_positions)

DRAFT_WEIGHTS = ROOT / "fixtures" / "model" / "draft_llama.npz"
SAMPLED = 0.8
FED = 16     # the summary's budget: the pending token and 15 draft nodes, one 16-row gemm per pass
K_MODEL = 3  # the summary's draft length for the draft model
# Tokens per pass of chain and tree are counted over outputs this long: the longer the output, the
# more of it repeats what came before it, and the more earlier occurrences a tree can hold (the
# full run prints the ratio at shorter lengths too).
TREE_MAX_NEW = 256
K_LOOKUP = 4


class NoDraft:
    """No speculation: every round feeds the pending token alone."""

    def propose(self, ctx, pending, k):
        return DraftTree([int(pending)], [-1])


class TimedTarget(RunnerTarget):
    """A RunnerTarget that adds up the seconds its tree passes take and counts the rounds that
    ended on a rejected draft token (fewer nodes kept than the chain fed)."""

    seconds = 0.0
    rejections = 0
    _fed = 0

    def extend_tree(self, ids, positions, mask):
        began = time.perf_counter()
        self._fed = len(ids)
        try:
            return super().extend_tree(ids, positions, mask)
        finally:
            self.seconds += time.perf_counter() - began

    def keep_path(self, start, path):
        self.rejections += len(path) < self._fed
        super().keep_path(start, path)


class TimedDrafter:
    """A drafter that adds up the seconds its proposals take."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seconds = 0.0

    def propose(self, ctx, pending, k):
        began = time.perf_counter()
        try:
            return self.inner.propose(ctx, pending, k)
        finally:
            self.seconds += time.perf_counter() - began


@dataclass
class Run:
    tokens: list[int]
    drafted: int
    accepted: int
    rounds: int
    seconds: float
    pass_seconds: float
    draft_seconds: float
    rejections: int


def run_once(model: TinyLlama, drafter, prompt: list[int], temperature: float, seed: int, max_new: int) -> Run:
    target = TimedTarget(model, model.new_pool(64, BLOCK_TOKENS))
    timed = TimedDrafter(drafter)
    began = time.perf_counter()
    out = generate_tree(target, timed, prompt, SamplingParams(temperature=temperature), seed, max_new, [])
    seconds = time.perf_counter() - began
    s = out.stats
    rounds = s.target_calls - (len(prompt) > 1)  # the prompt's own pass verifies nothing
    return Run(out.tokens, s.drafted, s.accepted, rounds, seconds, target.seconds, timed.seconds,
               target.rejections)


def drafter_for(name: str, k: int, draft_model: TinyLlama | None, temperature: float, seed: int):
    if name == "none":
        return NoDraft()
    if name == "chain":
        return PromptLookupDrafter(k=k)
    if name == "tree":
        return SuffixTreeDrafter(k=k)
    return ModelDrafter(draft_model, SamplingParams(temperature=temperature), k=k, seed=seed)


def check_greedy(name: str, workload: str, p: int, k: int, run: Run, plain: Run) -> None:
    if run.tokens != plain.tokens:
        print(f"FAIL: greedy output with {name}, k={k} on {workload} prompt {p} differs from plain greedy:\n"
              f"  {bytes(plain.tokens)!r}\n  {bytes(run.tokens)!r}")
        raise SystemExit(1)


def trees_vs_chains(model: TinyLlama, draft_model: TinyLlama, ks: list[int], prompts_per: int,
                    max_new: int, drafts=("chain", "tree", "model"), workloads=REPETITIVE + ("prose",)
                    ) -> tuple[list[dict], dict]:
    """Tokens per pass of chain and tree (and the greedy draft model) at each k, temperature 0;
    and the greedy text (prompt and output) of every repetitive prompt."""
    rows, texts = [], {}
    for name in workloads:
        for p, text in enumerate(WORKLOADS[name][:prompts_per]):
            prompt = list(text.encode())
            plain = run_once(model, NoDraft(), prompt, 0.0, 0, max_new)
            if name in REPETITIVE:
                texts[(name, p)] = (prompt, plain.tokens)
            for k in ks:
                for draft in drafts:
                    run = run_once(model, drafter_for(draft, k, draft_model, 0.0, 0), prompt, 0.0, 0, max_new)
                    check_greedy(draft, name, p, k, run, plain)
                    rows.append({"workload": name, "prompt": p, "k": k, "draft": draft,
                                 "tokens": len(run.tokens), "rounds": run.rounds,
                                 "fed": run.drafted + run.rounds, "drafted": run.drafted,
                                 "accepted": run.accepted})
    return rows, texts


def chain_misses(texts: dict, k: int) -> dict:
    """Why a tree from the context cannot do much better: replay the greedy text with a prompt
    lookup chain of ``k`` and, for every round that ends on a rejected draft token, ask whether the
    byte greedy wanted there ever followed an earlier occurrence of the last 3, 2 or 1 bytes
    (a tree of several occurrences could have held it) or never did (no tree from the text can)."""
    out = {"rounds": 0, "missed": 0, "after 2-3 bytes": 0, "after the last byte only": 0, "never": 0}
    for prompt, tokens in texts.values():
        text, t = prompt + tokens, len(prompt)
        while t < len(text):
            draft = prompt_lookup(text[:t], min(k, len(text) - t - 1), 3, 1)
            kept = 0
            while kept < len(draft) and draft[kept] == text[t + kept]:
                kept += 1
            out["rounds"] += 1
            if kept < len(draft):
                out["missed"] += 1
                ctx, want = text[:t + kept], text[t + kept]
                n = next((n for n in (3, 2, 1) if any(ctx[i:i + n] == ctx[-n:] and ctx[i + n] == want
                                                       for i in range(len(ctx) - n))), 0)
                out["never" if n == 0 else "after the last byte only" if n == 1 else "after 2-3 bytes"] += 1
            t += kept + 1
    return out


def per_pass(rows: list[dict], draft: str, k: int, workloads) -> dict:
    picked = [r for r in rows if r["draft"] == draft and r["k"] == k and r["workload"] in workloads]
    tokens, rounds = sum(r["tokens"] for r in picked), sum(r["rounds"] for r in picked)
    drafted = sum(r["drafted"] for r in picked)
    return {"tokens_per_pass": tokens / rounds, "fed_per_pass": sum(r["fed"] for r in picked) / rounds,
            "accept": sum(r["accepted"] for r in picked) / drafted if drafted else 0.0}


def print_tree_table(rows: list[dict], ks: list[int]) -> None:
    print("Temperature 0, tokens per verifying pass (fed nodes per pass, accepted / drafted nodes):")
    head = f"{'workload':8} {'k':>2}  {'chain (prompt lookup)':>22}  {'tree (suffix trie)':>22}  " \
           f"{'tree/chain':>10}  {'draft model chain':>22}"
    print(head)
    print("-" * len(head))
    for name in REPETITIVE + ("prose", "repetitive"):
        workloads = REPETITIVE if name == "repetitive" else (name,)
        for k in ks:
            cells = {d: per_pass(rows, d, k, workloads) for d in ("chain", "tree", "model")}
            fmt = {d: f"{c['tokens_per_pass']:5.2f} ({c['fed_per_pass']:4.2f}, {c['accept']:4.2f})"
                   for d, c in cells.items()}
            ratio = cells["tree"]["tokens_per_pass"] / cells["chain"]["tokens_per_pass"]
            print(f"{name:8} {k:>2}  {fmt['chain']:>22}  {fmt['tree']:>22}  {ratio:9.2f}x  {fmt['model']:>22}")


def interleaved(model: TinyLlama, draft_model: TinyLlama, configs: list[tuple[str, int]], cases: list,
                temperature: float, repeats: int, max_new: int) -> tuple[dict, dict]:
    """Run every config ``repeats`` times on every (prompt, seed) case, interleaved in a rotating
    order; return each config's median seconds per case and its runs of the last repeat."""
    medians: dict[tuple, list[float]] = {c: [] for c in configs}
    last: dict[tuple, list[Run]] = {c: [] for c in configs}
    for prompt, seed in cases:
        times: dict[tuple, list[float]] = {c: [] for c in configs}
        for rep in range(repeats):
            shift = rep % len(configs)  # nobody always runs first or last
            for config in configs[shift:] + configs[:shift]:
                drafter = drafter_for(config[0], config[1], draft_model, temperature, seed)
                run = run_once(model, drafter, prompt, temperature, seed, max_new)
                times[config].append(run.seconds)
                if rep == repeats - 1:
                    last[config].append(run)
        for config in configs:
            medians[config].append(statistics.median(times[config]))
    return medians, last


def tree_clock(model: TinyLlama, k: int, prompts_per: int, repeats: int, max_new: int) -> dict:
    """Wall-clock speed-up over no speculation of the chain and the tree at ``k``, temperature 0,
    on the repeating workloads: does the tree's extra tokens per pass pay for its dearer pass?"""
    configs = [("none", 0), ("chain", k), ("tree", k)]
    cases = [(list(text.encode()), 0) for name in REPETITIVE for text in WORKLOADS[name][:prompts_per]]
    medians, _ = interleaved(model, model, configs, cases, 0.0, repeats, max_new)
    base = sum(medians[("none", 0)])
    return {"k": k, "chain": base / sum(medians[("chain", k)]), "tree": base / sum(medians[("tree", k)])}


def draft_speedups(model: TinyLlama, draft_model: TinyLlama, k_models: list[int], k_lookup: int, seeds: int,
                   repeats: int, max_new: int) -> dict:
    """Wall-clock time of none / prompt lookup / the draft model at each k on prose at T = 0.8.

    Every (prompt, seed) runs each config ``repeats`` times, interleaved; a config's time is the sum
    over (prompt, seed) of its median, its speed-up none's sum over it.
    """
    configs = [("none", 0), ("chain", k_lookup)] + [("model", k) for k in k_models]
    cases = [(list(text.encode()), seed) for text in WORKLOADS["prose"] for seed in range(seeds)]
    medians, last = interleaved(model, draft_model, configs, cases, SAMPLED, repeats, max_new)
    base = sum(medians[("none", 0)])
    pass_ms = 1e3 * sum(r.pass_seconds for r in last[("none", 0)]) / sum(r.rounds for r in last[("none", 0)])
    out = []
    for draft, k in configs:
        runs = last[(draft, k)]
        drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
        # a chain token is reached only when those before it were accepted: the formula's a is
        # accepted over accepted plus rejected tokens, not over every drafted one
        tried = accepted + sum(r.rejections for r in runs)
        a = accepted / tried if tried else 0.0
        row = {"draft": draft, "k": k, "speedup": base / sum(medians[(draft, k)]), "accept": a,
               "tokens_per_pass": sum(len(r.tokens) for r in runs) / sum(r.rounds for r in runs),
               "pass_ms": 1e3 * sum(r.pass_seconds for r in runs) / sum(r.rounds for r in runs),
               "draft_ms_per_token": 1e3 * sum(r.draft_seconds for r in runs) / drafted if drafted else 0.0,
               "other_ms_per_pass": 1e3 * sum(r.seconds - r.pass_seconds - r.draft_seconds for r in runs)
               / sum(r.rounds for r in runs)}
        if draft == "model":
            c = row["draft_ms_per_token"] / pass_ms
            row["cost_ratio"] = c
            row["formula"] = (1 - a ** (k + 1)) / ((1 - a) * (k * c + 1)) if a < 1 else (k + 1) / (k * c + 1)
        out.append(row)
    return {"k_lookup": k_lookup, "none_pass_ms": pass_ms, "rows": out}


def print_draft_table(result: dict) -> None:
    print(f"\nProse at T = {SAMPLED}: wall-clock speed-up over no speculation (medians of interleaved repeats)")
    head = f"{'draft':14} {'k':>2} {'a':>6} {'tok/pass':>8} {'pass ms':>7} {'draft ms/tok':>12} " \
           f"{'other ms':>8} {'c':>5} {'formula':>7} {'speed-up':>8}"
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        label = {"none": "none", "chain": "prompt lookup", "model": "draft model"}[r["draft"]]
        c, f = (f"{r['cost_ratio']:5.3f}", f"{r['formula']:6.2f}x") if "formula" in r else ("", "")
        print(f"{label:14} {r['k']:>2} {r['accept']:6.2f} {r['tokens_per_pass']:8.2f} {r['pass_ms']:7.3f} "
              f"{r['draft_ms_per_token']:12.3f} {r['other_ms_per_pass']:8.3f} {c:>5} {f:>7} {r['speedup']:7.2f}x")
    print("a: accepted draft tokens over accepted plus rejected ones (a token after a rejection is "
          "never tried); other: ms per pass outside the target's pass and the drafter (verification, "
          "compaction, the loop); c: the draft's seconds per proposed token over one pass of the target "
          "without speculation; formula: (1 - a^(k+1)) / ((1 - a)(k c + 1))")


WIDE = [-1, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]  # four branches of four below the root
CHAIN = list(range(-1, 15))


def pass_costs(model: TinyLlama, draft_model: TinyLlama, context: int = 128, calls: int = 200) -> dict:
    """Median ms of one pass after ``context`` cached positions, all interleaved: the target feeding
    1 and 4 ids, a 16-node chain and a 16-node tree (four branches of four) through extend_tree,
    and the draft model feeding 1 id (its share of one proposed token)."""
    prompt = list(WORKLOADS["prose"][0].encode() * 4)[:context]
    ids = prompt[:16]
    cases = {
        "target_1": (model, lambda r: r.extend(ids[:1])),
        "target_4": (model, lambda r: r.extend(ids[:4])),
        "chain_16": (model, lambda r: r.extend_tree(ids, tree_positions(context, CHAIN), tree_mask(CHAIN))),
        "tree_16": (model, lambda r: r.extend_tree(ids, tree_positions(context, WIDE), tree_mask(WIDE))),
        "draft_1": (draft_model, lambda r: r.extend(ids[:1])),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    runners = {}
    for name, (m, _) in cases.items():
        runners[name] = RunnerTarget(m, m.new_pool(64, BLOCK_TOKENS))
        runners[name].extend(prompt)
    for _ in range(calls):
        for name, (_, feed) in cases.items():
            began = time.perf_counter()
            feed(runners[name])
            times[name].append(time.perf_counter() - began)
            runners[name].truncate(context)
    out = {f"{name}_ms": 1e3 * statistics.median(t) for name, t in times.items()}
    out["draft_over_target_4"] = out["draft_1_ms"] / out["target_4_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="Token trees and the draft model on the trained tiny llama.")
    ap.add_argument("--quick", action="store_true", help="one k, one prompt per workload, fewer repeats")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out", help="folder for trees.json")
    ap.add_argument("--draft", type=Path, default=DRAFT_WEIGHTS, help="the draft llama's .npz")
    args = ap.parse_args()
    out_folder(args.out)

    model = TinyLlama.load(WEIGHTS)
    draft_model = TinyLlama.load(args.draft)
    draft_model.batch_invariant = False
    began = time.perf_counter()
    if args.quick:
        ks, prompts_per, max_new, seeds, repeats, k_models = [FED - 1], 1, 64, 3, 3, [2, 3]
    else:
        ks, prompts_per, max_new, seeds, repeats, k_models = [3, 7, 11, 15], 2, 96, 5, 5, [1, 2, 3, 4, 6]
    print(f"Chain and tree over {TREE_MAX_NEW} emitted bytes per prompt:")
    rows, texts = trees_vs_chains(model, draft_model, ks, prompts_per, TREE_MAX_NEW)
    print_tree_table(rows, ks)
    if not args.quick:
        for length in (64, 128):
            short, _ = trees_vs_chains(model, draft_model, [FED - 1], prompts_per, length, ("chain", "tree"), REPETITIVE)
            c, tr = per_pass(short, "chain", FED - 1, REPETITIVE), per_pass(short, "tree", FED - 1, REPETITIVE)
            print(f"over {length} emitted bytes, k={FED - 1}: chain {c['tokens_per_pass']:.2f}, tree "
                  f"{tr['tokens_per_pass']:.2f} tokens per pass ({tr['tokens_per_pass'] / c['tokens_per_pass']:.2f}x)")
    misses = chain_misses(texts, FED - 1)
    print(f"prompt lookup chain, k={FED - 1}, replayed on the greedy text: {misses['missed']} of {misses['rounds']} "
          f"rounds end on a rejected token; the wanted byte followed an earlier occurrence of the last 2-3 "
          f"bytes in {misses['after 2-3 bytes']}, of the last byte only in {misses['after the last byte only']}, "
          f"never in {misses['never']}")
    clock = tree_clock(model, FED - 1, prompts_per, repeats, max_new)
    print(f"wall clock at T = 0, k={FED - 1}, repeating workloads (medians of interleaved repeats): speed-up over "
          f"no speculation, chain {clock['chain']:.2f}x, tree {clock['tree']:.2f}x")
    chain = per_pass(rows, "chain", FED - 1, REPETITIVE)
    tree = per_pass(rows, "tree", FED - 1, REPETITIVE)
    drafts = draft_speedups(model, draft_model, k_models, K_LOOKUP, seeds, repeats, max_new)
    print_draft_table(drafts)
    costs = pass_costs(model, draft_model)
    print(f"one pass after 128 positions (median of 200, interleaved): target {costs['target_1_ms']:.3f} ms "
          f"feeding 1 id, {costs['target_4_ms']:.3f} ms feeding 4, {costs['chain_16_ms']:.3f} ms for a 16-node "
          f"chain, {costs['tree_16_ms']:.3f} ms for a 16-node tree (4 branches of 4); draft model "
          f"{costs['draft_1_ms']:.3f} ms feeding 1 ({costs['draft_over_target_4']:.2f} of the target's 4-id pass)")
    drafts["pass_costs"] = costs
    report = {"quick": args.quick, "ks": ks, "max_new": max_new, "tree_max_new": TREE_MAX_NEW, "seeds": seeds,
              "repeats": repeats,
              "seconds": time.perf_counter() - began, "trees": rows, "chain_misses": misses, "tree_clock": clock,
              "draft_model": drafts}
    (args.out / "trees.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'trees.json'} ({report['seconds']:.0f} s)")
    model_row = next(r for r in drafts["rows"] if r["draft"] == "model" and r["k"] == K_MODEL)
    lookup_row = next(r for r in drafts["rows"] if r["draft"] == "chain")
    ratio = tree["tokens_per_pass"] / chain["tokens_per_pass"]
    print(f"trees: tokens/pass chain {chain['tokens_per_pass']:.2f} vs tree {tree['tokens_per_pass']:.2f} "
          f"({ratio:.2f}x) at {FED} fed; draft model T=0.8 prose: speed-up "
          f"{model_row['speedup']:.2f}x (prompt lookup {lookup_row['speedup']:.2f}x)")


if __name__ == "__main__":
    main()
