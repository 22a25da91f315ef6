"""Distil the tiny llama into a much smaller draft llama (L10.9) and export it as .npz.

Build-time only, like ``oracle/train_tiny_llama.py`` (whose torch mirror, corpus and windows this
reuses): it needs torch, the course never does. The teacher is the shipped target
``fixtures/model/tiny_llama.npz``; the student learns the teacher's whole next-byte distribution
(cross-entropy against the teacher's probabilities at temperature 1) on the same stdlib windows,
half of them holding a span written twice, as the target was taught to copy. A draft is judged by
how often the target accepts what it proposes, so it imitates the target, not the text.

One layer of width 64 (251 kB, against the target's three layers of width 128): in the numpy
engine one of its passes costs about a fifth of a target pass, and a draft pays that for every
token it proposes.

The report (``draft_llama.json``) records, on ``fixtures/model/held_out.txt`` (text neither model
trained on): the greedy agreement (the draft's argmax equals the target's, teacher-forced; 0.62),
and the expected acceptance of one sampled draft token at temperature 0.8, the mean of
``sum_x min(p(x), q(x))`` over the positions (0.65). Its cost per proposal against a target pass
is measured in the numpy engine by ``bench/trees.py``.

    nice -n 10 python oracle/train_draft_llama.py   # 1500 steps: 3 minutes on a free core, 8 on a busy one
"""

import hashlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "oracle"))

from train_tiny_llama import (HELD_OUT, Mirror, batch_of, corpus, export, optimizer,  # noqa: E402
                              training_args)

from tinyllm.model import LlamaConfig, TinyLlama  # noqa: E402

CONFIG = LlamaConfig(vocab=256, dim=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden=172)
TEACHER = ROOT / "fixtures" / "model" / "tiny_llama.npz"
FIXTURE = ROOT / "fixtures" / "model" / "draft_llama.npz"


def teacher_mirror() -> Mirror:
    """The shipped target's weights in the torch mirror, frozen."""
    target = TinyLlama.load(TEACHER)
    mirror = Mirror(target.config, 0)
    with torch.no_grad():
        for name, w in target.weights.items():
            mirror.w[name.replace(".", "_")].copy_(torch.from_numpy(w))
    mirror.requires_grad_(False)
    return mirror.eval()


def agreement(student: Mirror, teacher: Mirror, ids: list[int], temperature: float) -> tuple[float, float]:
    """(greedy agreement, mean sum_x min(p, q) at ``temperature``) over every position of ``ids``."""
    x = torch.tensor([ids])
    with torch.no_grad():
        p_logits, q_logits = teacher(x)[0], student(x)[0]
    same = (p_logits.argmax(-1) == q_logits.argmax(-1)).float().mean().item()
    p = torch.softmax(p_logits / temperature, -1)
    q = torch.softmax(q_logits / temperature, -1)
    return same, torch.minimum(p, q).sum(-1).mean().item()


def held_out_windows(length: int) -> list[list[int]]:
    data = list(HELD_OUT.read_bytes())
    return [data[i:i + length] for i in range(0, len(data) - 16, length)]


def evaluate(student: Mirror, teacher: Mirror, length: int) -> dict:
    windows = held_out_windows(length)
    sizes = [len(w) for w in windows]
    greedy, sampled = zip(*(agreement(student, teacher, w, 0.8) for w in windows))
    return {"greedy_agreement": round(float(np.average(greedy, weights=sizes)), 4),
            "accept_t08": round(float(np.average(sampled, weights=sizes)), 4)}


def main() -> None:
    args = training_args(__doc__.splitlines()[0], 1500, 0.5, FIXTURE)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train, _, names = corpus()
    train_arr = np.frombuffer(train, dtype=np.uint8)
    teacher = teacher_mirror()
    student = Mirror(CONFIG, args.seed)
    opt, schedule = optimizer(student.parameters(), args.lr, args.steps)
    began = time.perf_counter()
    for step in range(args.steps):
        rows = batch_of(train_arr, rng, args.batch, args.length, args.share)[:, :-1]
        with torch.no_grad():
            p = torch.softmax(teacher(rows), -1)
        loss = -(p * F.log_softmax(student(rows), -1)).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        schedule.step()
        if step % 250 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  cross-entropy to the target {loss.item() / math.log(2):.3f} bits  "
                  f"{time.perf_counter() - began:6.1f} s", flush=True)
    minutes = (time.perf_counter() - began) / 60

    student.eval()
    diff = export(student, args.out, args.length)
    report = {
        "config": CONFIG.__dict__, "teacher": TEACHER.name,
        "teacher_sha256": hashlib.sha256(TEACHER.read_bytes()).hexdigest(), "files": len(names),
        "steps": args.steps, "share": args.share, "batch": args.batch, "length": args.length,
        "seed": args.seed, "minutes": round(minutes, 2),
        "held_out": evaluate(student, teacher, args.length),
        "numpy_vs_torch_max_abs_diff": diff,
        "sha256": hashlib.sha256(args.out.read_bytes()).hexdigest(), "bytes": args.out.stat().st_size,
    }
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
