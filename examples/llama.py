"""A torchtitan-style Llama in plain torch, and the factory `schedc profile --model` calls.

    schedc profile --model examples/llama.py:stages --stages 4 --mbs 2 -o llama.json
    schedc profile --model examples/llama.py:stages --layers 8 --hidden 256 -o llama.json
    schedc profile --model examples/llama.py:stages --units --layers 8 -o llama-units.json

``stages`` takes the parameter names every schedc example uses (``layers``, ``hidden``, ``heads``,
``kv_heads``, ``ffn_hidden``, ``seq_len``, ``vocab_size``, plus ``n_stages``, ``microbatch_size``,
``dtype``); ``schedc profile`` passes its ``--layers``, ``--hidden``, ``--heads``, ``--kv-heads``,
``--ffn``, ``--seq``, ``--vocab`` flags and ``--model-arg KEY=VALUE`` under those names.
``kv_heads`` below ``heads`` gives grouped-query attention as in Llama 3 (8 key/value heads for
32 query heads in the 8B model): each key/value head serves ``heads / kv_heads`` query heads.

The module layout is torchtitan's (``tok_embeddings``, ``layers`` as a ModuleDict keyed "0",
"1", ..., ``norm``, ``lm_head``) and ``forward`` skips any of them that is None, so torchtitan's
``pipeline_llm`` splits it by module names exactly as it splits its own Llama 3 (the
integration tests run it that way). Blocks: RMSNorm, causal attention with rotary position
embeddings (a cos/sin buffer the model owns), RMSNorm, SwiGLU feed-forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int = 256
    dim: int = 64
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 0  # 0: n_heads (no grouping)
    seq_len: int = 32
    ffn_dim: int = 0  # 0: about 8/3 of dim, rounded up to a multiple of 8
    rope_theta: float = 10000.0
    dtype: str = "float32"

    def ffn(self) -> int:
        return self.ffn_dim or 8 * ((8 * self.dim // 3 + 7) // 8)

    def kv_heads(self) -> int:
        kv = self.n_kv_heads or self.n_heads
        if self.n_heads % kv or self.dim % self.n_heads:
            raise ValueError(f"heads {self.n_heads} must be a multiple of kv_heads {kv} and divide hidden {self.dim}")
        return kv


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads(), cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = (w(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2) for w in (self.wk, self.wv))
        q, k = _rope(q, cos[:t], sin[:t]), _rope(k, cos[:t], sin[:t])
        if self.n_kv_heads != self.n_heads:  # each key/value head serves a group of query heads
            group = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn(), bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn(), bias=False)
        self.w2 = nn.Linear(cfg.ffn(), cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.dim)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.dim)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig, seed: int = 0):
        super().__init__()
        dtype = getattr(torch, cfg.dtype)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
            self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg) for i in range(cfg.n_layers)})
            self.norm = nn.RMSNorm(cfg.dim)
            self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        head_dim = cfg.dim // cfg.n_heads
        freqs = 1.0 / cfg.rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(cfg.seq_len, dtype=torch.float64), freqs)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.to(dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # Any part may be None: torchtitan's pipeline split keeps only one stage's modules.
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h, self.rope_cos, self.rope_sin)
        h = self.norm(h) if self.norm is not None else h
        return self.lm_head(h) if self.lm_head is not None else h


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def fqns_per_stage(cfg: LlamaConfig, n_stages: int) -> list[list[str]]:
    """Module names per stage: layers spread evenly, embedding on the first, norm + head on the last
    (torchtitan's ``module_fqns_per_model_part`` form)."""
    if not 1 <= n_stages <= cfg.n_layers:
        raise ValueError(f"n_stages must be between 1 and the {cfg.n_layers} layers, got {n_stages}")
    bounds = [round(s * cfg.n_layers / n_stages) for s in range(n_stages + 1)]
    parts = [[f"layers.{i}" for i in range(bounds[s], bounds[s + 1])] for s in range(n_stages)]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "lm_head"]
    return parts


def stages(n_stages: int = 2, microbatch_size: int = 4, dtype: str = "float32", layers: int = 4, hidden: int = 64,
           heads: int = 4, seq_len: int = 32, vocab_size: int = 256, ffn_hidden: int = 0, kv_heads: int = 0) -> dict:
    """The `schedc profile --model` factory: the model with a split rule, a sample microbatch, the loss
    (``hidden`` is the model's ``dim``; ``ffn_hidden`` 0: about 8/3 of it; ``kv_heads`` 0: ``heads``)."""
    cfg = LlamaConfig(vocab_size=vocab_size, dim=hidden, n_layers=layers, n_heads=heads, seq_len=seq_len,
                      ffn_dim=ffn_hidden, dtype=dtype, n_kv_heads=kv_heads)
    cfg.kv_heads()  # a wrong grouping is one line here, before any module is built
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab_size, (microbatch_size, seq_len + 1), generator=gen)
    return {
        "model": Llama(cfg),
        "split": fqns_per_stage(cfg, n_stages),
        "sample": tokens[:, :-1],
        "target": tokens[:, 1:],
        "loss_fn": lm_loss,
        "name": f"llama(layers={layers}, hidden={hidden}, ffn={cfg.ffn()}, heads={heads}, "
                + (f"kv_heads={cfg.kv_heads()}, " if cfg.kv_heads() != heads else "")
                + f"seq={seq_len}, vocab={vocab_size})",
    }
