"""A small GPT-style causal language model in pure torch, for the example, tests and profiler.

Problem: pipeline tests, the training example and the profiler presets need one model that is a
plain sequence of identical blocks between an embedding and a head, so that splitting it into
stages is obvious, and that is deterministic from a seed so an unsplit copy gives reference
gradients. Method: token + position embedding, ``layers`` pre-norm transformer blocks (causal
multi-head self-attention via ``scaled_dot_product_attention``, then a GELU MLP), final
LayerNorm, untied linear LM head. Cost: the usual O(layers * seq * hidden^2 + layers * seq^2 *
hidden) per sequence; tiny sizes run in milliseconds on a CPU.

The loss is next-token cross-entropy: ``logits`` at position t predict ``targets`` at t, where
the caller passes ``targets = tokens shifted by one`` (see :func:`make_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float64": torch.float64,
    "fp64": torch.float64,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """'float32' / 'bf16' / torch.float64 ... -> torch.dtype."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[str(name).lower()]
    except KeyError:
        raise ValueError(f"dtype must be one of {', '.join(sorted(_DTYPES))}, got {name!r}") from None


@dataclass
class GPTConfig:
    vocab_size: int = 256
    hidden: int = 64
    layers: int = 4
    heads: int = 4
    seq_len: int = 32
    dropout: float = 0.0
    dtype: str = "float32"
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "layers", "heads", "seq_len", "mlp_ratio"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:  # after the check above: heads 0 would divide by zero
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")

    @property
    def torch_dtype(self) -> torch.dtype:
        return parse_dtype(self.dtype)


class Embedding(nn.Module):
    """Token + learned position embedding: (batch, seq) int64 -> (batch, seq, hidden)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq_len, cfg.hidden)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[-1], device=tokens.device)
        return self.drop(self.tok(tokens) + self.pos(positions))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, h))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.hidden, cfg.mlp_ratio * cfg.hidden)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.hidden, cfg.hidden)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """``embed`` -> ``blocks`` (nn.ModuleList) -> ``norm`` -> ``head``.

    A stage made by :func:`schedc.runtime.split.split_model` keeps the same class with the parts
    it does not own set to ``None`` (and the blocks it does not own removed), so ``forward`` runs
    whichever slice it holds: tokens in when ``embed`` is present, hidden states otherwise;
    logits out when ``head`` is present, hidden states otherwise.
    """

    def __init__(self, cfg: GPTConfig, seed: int | None = 0):
        super().__init__()
        self.config = cfg
        if seed is not None:
            # Build under a private generator state so the same seed gives the same weights
            # regardless of what the caller did with the global RNG before.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self._build(cfg)
        else:
            self._build(cfg)
        self.to(cfg.torch_dtype)

    def _build(self, cfg: GPTConfig) -> None:
        self.embed = Embedding(cfg)
        blocks = [TransformerBlock(cfg) for _ in range(cfg.layers)]
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab_size, bias=False)
        self.apply(_init_weights)
        # GPT-2's scaled init of residual projections keeps activations bounded with depth.
        for block in blocks:
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, mean=0.0, std=0.02 / (2 * cfg.layers) ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        if self.norm is not None:
            x = self.norm(x)
        if self.head is not None:
            x = self.head(x)
        return x


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; ``targets`` are the tokens shifted by one position.

    Signature ``(output, target)`` is what torch's pipeline schedules call ``loss_fn`` with.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # softmax in low precision loses the small probabilities
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_batch(
    cfg: GPTConfig, batch_size: int, seed: int = 0, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic batch with a learnable pattern: (tokens, targets), both (batch, seq_len) int64.

    Each sequence is an arithmetic progression modulo ``vocab_size`` with a random start and a
    random stride from a small set, so the next token is predictable from the previous two and
    the loss drops quickly from ``log(vocab_size)``. Deterministic in ``seed``.
    """
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, cfg.vocab_size, (batch_size, 1), generator=g)
    stride = torch.randint(1, 8, (batch_size, 1), generator=g)
    seq = (start + stride * torch.arange(cfg.seq_len + 1)) % cfg.vocab_size
    return seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)
