"""The shipped weights are trained, and speculation changes nothing in their greedy output."""

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tinyllm.model import TinyLlama
from tinyllm.runner import RunnerTarget
from tinyllm.sampling import SamplingParams
from tinyllm.spec import SpecConfig, generate

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "model"
WEIGHTS = FOLDER / "tiny_llama.npz"
CONTEXT = 384  # the window length the model was trained on
COPY_THRESHOLD = 0.85  # the shipped weights reach 0.93; before they learned to copy, 0.61


@pytest.fixture(scope="module")
def model() -> TinyLlama:
    return TinyLlama.load(WEIGHTS)


def test_weights_match_their_recorded_digest():
    record = json.loads(WEIGHTS.with_suffix(".json").read_text())
    assert hashlib.sha256(WEIGHTS.read_bytes()).hexdigest() == record["sha256"]
    assert WEIGHTS.stat().st_size <= 8 * 2**20


def bits_per_byte(model: TinyLlama, data: bytes) -> float:
    """Cross-entropy in bits of every byte after the first of each fresh window."""
    total, count = 0.0, 0
    for start in range(0, len(data) - 1, CONTEXT):
        ids = list(data[start:start + CONTEXT + 1])
        fed = ids[:-1]
        pool = model.new_pool(-(-len(fed) // 16), 16)
        logits = model.forward(pool, [list(range(pool.num_blocks))] * len(fed), list(range(len(fed))), fed)
        z = logits.astype(np.float64)
        log_z = np.log(np.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1)) + z.max(axis=1)
        total += float((log_z - z[np.arange(len(fed)), ids[1:]]).sum())
        count += len(fed)
    return total / count / math.log(2)


def full_logits(model: TinyLlama, ids: list[int]) -> np.ndarray:
    pool = model.new_pool(-(-len(ids) // 16), 16)
    return model.forward(pool, [list(range(pool.num_blocks))] * len(ids), list(range(len(ids))), ids)


def test_model_copies_a_held_out_text_written_twice(model):
    """Induction: once a span has been seen, the model predicts its repeat from context."""
    data = (FOLDER / "held_out.txt").read_bytes()
    span, hits, total = 160, 0, 0
    for start in range(0, len(data) - span, len(data) // 6):
        ids = list(data[start:start + span]) * 2
        guess = full_logits(model, ids[:-1]).argmax(axis=1)
        hits += int((guess[span:] == np.array(ids[span + 1:])).sum())
        total += span - 1
    assert hits / total > COPY_THRESHOLD, f"second-copy greedy accuracy {hits / total:.3f}"


def test_held_out_text_costs_far_fewer_than_8_bits_per_byte(model):
    bpb = bits_per_byte(model, (FOLDER / "held_out.txt").read_bytes())
    assert bpb < 2.5, f"{bpb:.3f} bits per byte"  # 2.01 for the shipped weights; uniform is 8


def test_greedy_with_prompt_lookup_equals_greedy_without(model):
    text = (FOLDER / "held_out.txt").read_text()
    block = text[text.index("    def low_stock"):text.index("    def total_pieces")]
    prompt = list(("Same method again:\n\n" + block + "\nAgain:\n\n" + block[:40]).encode())
    greedy = SamplingParams()
    plain = generate(RunnerTarget(model, model.new_pool(32, 16)), SpecConfig.parse("none", 1),
                     prompt, greedy, seed=0, max_new=80, eos=[])
    spec = generate(RunnerTarget(model, model.new_pool(32, 16)), SpecConfig.parse("prompt_lookup", 4),
                    prompt, greedy, seed=0, max_new=80, eos=[])
    assert spec.tokens == plain.tokens
    # drafts were accepted, so the equality above covers multi-token rounds and rollbacks
    assert spec.stats.accepted > 0 and spec.stats.target_calls < plain.stats.target_calls
