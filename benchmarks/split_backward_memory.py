"""How much torch's split backward frees at I (before W): the evidence for the default weight_grad fraction.

For the built-in GPT (a middle stage of blocks, and the last stage with norm, head and loss), a
plain MLP stack (Linear, GELU, Linear per layer) and a pre-norm attention block
(``nn.MultiheadAttention``), each as a middle stage (I starts from an output gradient) and as the
last stage (I starts from the loss), it runs F, ``stage_backward_input`` and
``stage_backward_weight`` as ``PipelineStage`` does (schedc.runtime.split_memory) and prints, in
MiB per microbatch: the activation after F, what is still held after I, what W frees, the
fraction held between I and W, the gradients I keeps for W and stores for the inputs (both new
allocations at I), the live-storage cross-check after F / I / W, and the profiler's own
``activation_bytes`` / ``weight_grad_bytes`` for the same stage.

    python benchmarks/split_backward_memory.py [--device cuda] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from schedc.runtime.models import GPT, GPTConfig, lm_loss, make_batch  # noqa: E402
from schedc.runtime.profiling.stages import measure_stages  # noqa: E402
from schedc.runtime.split import split_gpt  # noqa: E402
from schedc.runtime.split_memory import measure_split_backward  # noqa: E402


class AttentionBlock(nn.Module):
    """Pre-norm self-attention with a residual, then a LayerNorm: (batch, seq, hidden) in and out."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.out_ln = nn.LayerNorm(hidden)

    def forward(self, x):
        h = self.ln(x)
        return self.out_ln(x + self.attn(h, h, h, need_weights=False)[0])


def mlp_stack(hidden: int, layers: int) -> nn.Module:
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(hidden, 4 * hidden), nn.GELU(),
                                                              nn.Linear(4 * hidden, hidden))])


def gpt_case(hidden, layers, seq, vocab, mbs, last):
    cfg = GPTConfig(vocab_size=vocab, hidden=hidden, layers=3 * layers, heads=4, seq_len=seq)
    stages = split_gpt(GPT(cfg), range(3), 3)
    mods = [stages[s] for s in range(3)]
    tokens, targets = make_batch(cfg, mbs)
    with torch.no_grad():
        x = mods[0](tokens)
        if last:
            x = mods[1](x)
    i = 2 if last else 1
    return f"h={hidden} L={layers} s={seq} V={vocab} b={mbs}", mods, tokens, i, x, lm_loss, targets


def plain_case(name, module, x, last):
    """A module alone: after a parameter-free first stage (and before one, as a middle stage)."""
    target = torch.randn_like(x) if last else None
    mods = [nn.Identity(), module] + ([] if last else [nn.Identity()])
    return name, mods, x, 1, x, (F.mse_loss if last else None), target


def cases(quick: bool):
    gpt = [(64, 1, 32, 256, 2), (128, 2, 64, 1024, 4)] + ([] if quick else [(256, 2, 128, 4096, 4)])
    mlp = [(64, 2, 256), (256, 4, 512)] + ([] if quick else [(512, 4, 2048)])
    att = [(64, 4, 32, 2), (128, 4, 128, 4)] + ([] if quick else [(256, 8, 256, 4)])
    for last in (False, True):
        for h, L, s, v, b in gpt:
            yield "gpt", last, lambda h=h, L=L, s=s, v=v, b=b, last=last: gpt_case(h, L, s, v, b, last)
        for h, L, n in mlp:
            yield "mlp", last, lambda h=h, L=L, n=n, last=last: plain_case(f"h={h} L={L} tokens={n}", mlp_stack(h, L),
                                                                           torch.randn(n, h), last)
        for h, heads, s, b in att:
            yield "attention", last, lambda h=h, heads=heads, s=s, b=b, last=last: plain_case(f"h={h} heads={heads} s={s} b={b}", AttentionBlock(h, heads),
                                                        torch.randn(b, s, h), last)


def mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="the two smaller sizes of each kind only")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    torch.manual_seed(0)
    head = ("kind", "role", "sizes", "act F", "held I", "freed W", "held I/F", "grads W", "in.grad",
            "live F/I/W", "prof act", "prof wg")
    rows = []
    for kind, last, build in cases(args.quick):
        sizes, mods, first_in, i, x, loss_fn, target = build()
        for m in mods:
            m.to(dev)
        x, target = x.to(dev), (target.to(dev) if target is not None else None)
        mem = measure_split_backward(mods[i], x, is_last=last, loss_fn=loss_fn, target=target)
        prof = measure_stages(mods, first_in.to(dev), loss_fn, target, dev, warmup=0, repeats=1,
                              optimizer="none", only=[i])[0]
        live = f"{mib(mem.live_forward)}/{mib(mem.live_input)}/{mib(mem.live_weight)}"
        if mem.cuda_forward is not None:
            live += f" cuda {mib(mem.cuda_forward)}/{mib(mem.cuda_input)}/{mib(mem.cuda_weight)}"
        rows.append((kind, "last" if last else "middle", sizes, mib(mem.after_forward), mib(mem.after_input),
                     mib(mem.freed_at_weight), f"{mem.held_fraction:.3f}", mib(mem.grads_for_weight),
                     mib(mem.input_grads), live, mib(prof.activation_bytes), mib(prof.weight_grad_bytes)))
    widths = [max(len(str(r[k])) for r in [head, *rows]) for k in range(len(head))]
    print(f"split backward memory on {dev}, torch {torch.__version__} (MiB per microbatch; parameters excluded)")
    for r in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print("held I = saved tensors autograd still holds + the stage's inputs and outputs (kept until W);\n"
          "grads W = gradients I computed and keeps for W; in.grad = input gradients I stores (both new at I);\n"
          "live = every storage alive (a dispatch-mode count, incl. grads W and in.grad); prof = the profiler's numbers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
