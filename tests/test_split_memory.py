"""What torch's split backward (stage_backward_input / stage_backward_weight) frees at I and at W.

These pin torch 2.13's behaviour and our accounting of it: if torch starts freeing at I, or the
profiler's saved-tensor count drifts from what is really alive, they fail.
"""

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from schedc.runtime.models import GPT, GPTConfig, lm_loss, make_batch  # noqa: E402
from schedc.runtime.split import split_gpt  # noqa: E402
from schedc.runtime.split_memory import measure_split_backward  # noqa: E402

F32 = 4


def _mlp(h, layers):
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))])


def test_mlp_middle_stage_i_frees_nothing_and_w_frees_the_graph():
    h, layers, tokens = 16, 2, 8
    mem = measure_split_backward(_mlp(h, layers), torch.randn(tokens, h))
    act = tokens * F32 * (h + layers * (4 * h + 4 * h + h))  # input; per layer fc out, gelu out, proj out
    assert mem.after_forward == act
    # retain_graph=True: every saved tensor survives I, so the whole activation is held until W
    assert mem.held_fraction == 1.0
    # W runs the rest with retain_graph=False: only the stage's input and output stay
    assert mem.after_weight == 2 * tokens * h * F32
    # I also allocates: the gradient at every Linear's output, kept for W, and the input's grad
    assert mem.grads_for_weight == layers * tokens * (4 * h + h) * F32
    assert mem.input_grads == tokens * h * F32
    # the live-storage count sees exactly the same bytes
    assert mem.live_forward == mem.after_forward
    assert mem.live_input == mem.after_input + mem.grads_for_weight + mem.input_grads
    assert mem.live_weight == mem.after_weight + mem.input_grads


def test_mlp_last_stage_i_frees_only_the_loss_side():
    h, tokens = 16, 8
    target = torch.randn(tokens, h)
    mem = measure_split_backward(_mlp(h, 2), torch.randn(tokens, h), is_last=True, loss_fn=F.mse_loss, target=target)
    # mse_loss saves its target; detach_ of the loss at I drops that node, nothing below it
    assert mem.after_forward - mem.after_input == target.nbytes
    assert mem.held_fraction > 0.9


def test_attention_stage_is_freed_at_w():
    # SDPA saves its own output; the saved-tensor tracker must not keep that node alive
    cfg = GPTConfig(vocab_size=32, hidden=16, layers=3, heads=2, seq_len=8)
    stages = split_gpt(GPT(cfg), range(3), 3)
    tokens, _ = make_batch(cfg, 2)
    with torch.no_grad():
        x = stages[0](tokens)
    mem = measure_split_backward(stages[1], x)
    assert mem.held_fraction == 1.0
    assert mem.after_weight == 2 * x.nbytes  # input and output only
    assert mem.live_weight == mem.after_weight + mem.input_grads


def test_gpt_last_stage_frees_the_log_softmax_at_i():
    cfg = GPTConfig(vocab_size=64, hidden=16, layers=3, heads=2, seq_len=8)
    stages = split_gpt(GPT(cfg), range(3), 3)
    tokens, targets = make_batch(cfg, 2)
    with torch.no_grad():
        x = stages[1](stages[0](tokens))
    mem = measure_split_backward(stages[2], x, is_last=True, loss_fn=lm_loss, target=targets)
    log_probs = tokens.numel() * cfg.vocab_size * F32
    assert log_probs <= mem.after_forward - mem.after_input < log_probs + 1024
    assert mem.live_input == mem.after_input + mem.grads_for_weight + mem.input_grads
