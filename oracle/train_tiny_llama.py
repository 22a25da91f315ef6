"""Train the course's tiny llama on the Python standard library's source and export it as .npz.

Build-time only: this needs torch (``pip install torch==2.13.0``); the course never does. The
torch model below mirrors ``solutions/tinyllm/model.py`` op for op (RMSNorm, half-split rotary
positions from float64 angles, grouped K/V heads, SwiGLU, tied head), so the exported weights
drop into :class:`tinyllm.model.TinyLlama` unchanged; the export checks that both give the same
logits on the shipped held-out text.

Data: the bytes of every ``*.py`` file directly in this interpreter's standard library folder, in
sorted order (PSF-licensed text that every Python install carries). Every 20th file is held out
for validation. Prompt lookup bets on a model that continues what its context already holds, so
the windows teach that: each holds a span of text followed at once by itself (``--share`` of
them; all by default), and the loss covers the whole window, both copies and the text around.
Copying needs two attention layers working together (one marks each byte's predecessor, a later
one finds where the current byte occurred before and reads what followed), so every 100 steps
the log prints ``copy``, the greedy accuracy on the second copy of held-out spans written twice,
to watch it form: 0.43 at step 100, 0.80 at 900, 0.93 at the end.

    python oracle/train_tiny_llama.py   # 12 minutes; one thread beat two on 2 busy cores
"""

import argparse
import hashlib
import json
import math
import platform
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "solutions"))

from tinyllm.model import LlamaConfig, TinyLlama  # noqa: E402

CONFIG = LlamaConfig(vocab=256, dim=128, n_layers=3, n_heads=4, n_kv_heads=2, hidden=352)
FIXTURE = ROOT / "fixtures" / "model" / "tiny_llama.npz"
HELD_OUT = ROOT / "fixtures" / "model" / "held_out.txt"


class Mirror(torch.nn.Module):
    """The numpy model's forward over whole sequences, in torch, with trainable weights."""

    def __init__(self, c: LlamaConfig, seed: int) -> None:
        super().__init__()
        self.c = c
        start = TinyLlama.random(c, seed).weights
        self.w = torch.nn.ParameterDict({
            name.replace(".", "_"): torch.nn.Parameter(torch.from_numpy(start[name].copy()))
            for name in c.shapes()
        })
        with torch.no_grad():  # a small embedding trains more steadily than the std-1 default
            self.w["tok_emb"].mul_(0.1)
        half = c.head_dim // 2
        self.inv_freq = c.rope_theta ** (-np.arange(half, dtype=np.float64) / half)

    def rope(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        angles = np.arange(length, dtype=np.float64)[:, None] * self.inv_freq
        return (torch.from_numpy(np.cos(angles).astype(np.float32)),
                torch.from_numpy(np.sin(angles).astype(np.float32)))

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.c.norm_eps) * weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        c, w = self.c, self.w
        batch, length = ids.shape
        hd, group = c.head_dim, c.n_heads // c.n_kv_heads
        cos, sin = self.rope(length)

        def rotate(t: torch.Tensor) -> torch.Tensor:  # t: (batch, heads, length, hd)
            t1, t2 = t[..., :hd // 2], t[..., hd // 2:]
            return torch.cat([t1 * cos - t2 * sin, t1 * sin + t2 * cos], dim=-1)

        x = w["tok_emb"][ids]
        for i in range(c.n_layers):
            p = f"layers_{i}_"
            h = self.norm(x, w[p + "attn_norm"])
            q = (h @ w[p + "wq"]).view(batch, length, c.n_heads, hd).transpose(1, 2)
            k = (h @ w[p + "wk"]).view(batch, length, c.n_kv_heads, hd).transpose(1, 2)
            v = (h @ w[p + "wv"]).view(batch, length, c.n_kv_heads, hd).transpose(1, 2)
            q, k = rotate(q), rotate(k)
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + att.transpose(1, 2).reshape(batch, length, c.dim) @ w[p + "wo"]
            h = self.norm(x, w[p + "mlp_norm"])
            x = x + (F.silu(h @ w[p + "w_gate"]) * (h @ w[p + "w_up"])) @ w[p + "w_down"]
        head = w["tok_emb"].T if c.tied else w["output"]
        return self.norm(x, w["norm"]) @ head

    def numpy_weights(self) -> dict[str, np.ndarray]:
        return {name: self.w[name.replace(".", "_")].detach().numpy().copy() for name in self.c.shapes()}


def corpus() -> tuple[bytes, bytes, list[str]]:
    folder = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(folder.glob("*.py"))
    train = b"\n\n".join(f.read_bytes() for i, f in enumerate(files) if i % 20)
    valid = b"\n\n".join(f.read_bytes() for i, f in enumerate(files) if i % 20 == 0)
    return train, valid, [f.name for f in files]


def batch_of(data: np.ndarray, rng: np.random.Generator, batch: int, length: int,
             share: float) -> torch.Tensor:
    """Stdlib text windows, a ``share`` of them holding a span followed at once by itself.

    The span (16 bytes to half the window) makes the second copy predictable only by looking
    back at the first: the drill that makes a model copy what its context already holds.
    """
    starts = rng.integers(0, data.size - length - 1, batch)
    rows = np.stack([data[s:s + length + 1] for s in starts]).astype(np.int64)
    for row in rows[:round(batch * share)]:
        span = int(rng.integers(16, (length + 1) // 2 + 1))
        src = int(rng.integers(0, length + 2 - 2 * span))
        row[src + span:src + 2 * span] = row[src:src + span].copy()
    return torch.from_numpy(rows)


def copy_accuracy(model: Mirror, data: np.ndarray, span: int = 160, count: int = 16) -> float:
    """Greedy accuracy on the second copy of held-out spans each written twice in a row."""
    starts = np.linspace(0, data.size - span - 1, count).astype(np.int64)
    rows = np.stack([np.tile(data[s:s + span], 2) for s in starts]).astype(np.int64)
    with torch.no_grad():
        guess = model(torch.from_numpy(rows[:, :-1])).argmax(-1).numpy()
    return float((guess[:, span:] == rows[:, span + 1:]).mean())


def bits_per_byte(model: Mirror, data: np.ndarray, length: int) -> float:
    """Mean cross-entropy in bits over non-overlapping windows of ``data``."""
    windows = data[: (data.size - 1) // length * length + 1]
    ids = torch.from_numpy(windows[:-1].reshape(-1, length).astype(np.int64))
    targets = torch.from_numpy(windows[1:].reshape(-1, length).astype(np.int64))
    total = 0.0
    with torch.no_grad():
        for i in range(0, ids.shape[0], 16):
            logits = model(ids[i:i + 16])
            total += F.cross_entropy(logits.reshape(-1, 256), targets[i:i + 16].reshape(-1),
                                     reduction="sum").item()
    return total / targets.numel() / math.log(2)


def numpy_logits(model: TinyLlama, ids: list[int]) -> np.ndarray:
    """The numpy model's rows for a whole sequence in one forward through a pool."""
    block = 16
    pool = model.new_pool(-(-len(ids) // block), block)
    table = list(range(pool.num_blocks))
    return model.forward(pool, [table] * len(ids), list(range(len(ids))), ids)


def export(model: Mirror, out: Path, length: int) -> float:
    """Save the mirror's weights as a TinyLlama .npz; return the largest logit difference between
    the reloaded numpy model and torch on the first ``length`` held-out bytes (exit above 1e-3)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    TinyLlama(model.c, model.numpy_weights()).save(out)
    reloaded = TinyLlama.load(out)
    held_out = list(HELD_OUT.read_bytes()[:length])
    with torch.no_grad():
        reference = model(torch.tensor([held_out]))[0].numpy()
    diff = float(np.abs(numpy_logits(reloaded, held_out) - reference).max())
    if diff > 1e-3:
        raise SystemExit(f"numpy logits differ from torch's by {diff:.2e}: the mirror is wrong")
    return diff


def training_args(description: str, steps: int, share: float, out: Path) -> argparse.Namespace:
    """The command line of a training script (this one and ``train_draft_llama.py``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=384)
    ap.add_argument("--share", type=float, default=share, help="share of windows that repeat a span")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=out)
    return ap.parse_args()


def optimizer(params, lr: float, steps: int) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with a linear warm-up over the first 5% of the steps, then a cosine down to 10%."""
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, steps // 20)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))))


def main() -> None:
    args = training_args(__doc__.splitlines()[0], 2400, 1.0, FIXTURE)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train, valid, names = corpus()
    train_arr = np.frombuffer(train, dtype=np.uint8)
    valid_arr = np.frombuffer(valid, dtype=np.uint8)
    print(f"corpus: {len(names)} files from Python {platform.python_version()}'s stdlib, "
          f"{train_arr.size} training bytes, {valid_arr.size} validation bytes")

    model = Mirror(CONFIG, args.seed)
    opt, schedule = optimizer(model.parameters(), args.lr, args.steps)
    began = time.perf_counter()
    for step in range(args.steps):
        rows = batch_of(train_arr, rng, args.batch, args.length, args.share)
        logits = model(rows[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), rows[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item() / math.log(2):.3f} bits/byte  "
                  f"copy {copy_accuracy(model, valid_arr):.3f}  "
                  f"{time.perf_counter() - began:6.1f} s", flush=True)
    minutes = (time.perf_counter() - began) / 60

    model.eval()
    valid_bpb = bits_per_byte(model, valid_arr[:200_000], args.length)
    diff = export(model, args.out, args.length)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    report = {
        "config": CONFIG.__dict__, "python": platform.python_version(), "files": len(names),
        "train_bytes": int(train_arr.size), "steps": args.steps, "share": args.share, "batch": args.batch,
        "length": args.length, "seed": args.seed, "minutes": round(minutes, 2),
        "valid_bits_per_byte": round(valid_bpb, 4), "numpy_vs_torch_max_abs_diff": diff,
        "sha256": digest, "bytes": args.out.stat().st_size,
    }
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
