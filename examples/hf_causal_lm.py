"""A Hugging Face causal LM built from a config, split into pipeline stages: the `schedc profile --model` factory.

    schedc profile --model examples/hf_causal_lm.py:stages --stages 2 --mbs 2 -o hf.json
    schedc profile --model examples/hf_causal_lm.py:stages --model-arg arch=qwen3 --layers 8 -o hf.json
    schedc profile --model examples/hf_causal_lm.py:stages --units --layers 8 -o hf-units.json

``stages`` takes the parameter names every schedc example uses (``layers``, ``hidden``, ``heads``,
``kv_heads``, ``ffn_hidden``, ``seq_len``, ``vocab_size``, plus ``n_stages``, ``microbatch_size``,
``dtype`` and this example's ``arch``); ``schedc profile`` passes its shape flags under those names.

Needs ``transformers`` (5.x). The model comes from ``AutoModelForCausalLM.from_config`` with tiny
defaults and seeded random weights: nothing is downloaded, no weights, no tokenizer.

Splitting follows NeMo AutoModel's ``split_model_into_stages`` for HF models (module names per stage,
``generate_hf_model_fqn_per_model_part``): ``model.embed_tokens`` and the first layers on stage 0,
layers spread evenly, ``model.norm`` and ``lm_head`` on the last stage, and ``model.rotary_emb`` (a
buffer, no parameters) on every stage. HF's own ``forward`` cannot run a slice of the model (it
always embeds, it always has every layer), so, as NeMo patches the forward, ``PipelineCausalLM``
holds HF's modules under HF's names and its ``forward`` skips any part that is None. Each stage
takes the previous stage's hidden states alone and recomputes the position ids, the causal mask
and the rotary cos/sin itself from the sequence length: they depend on nothing else (no padding,
no KV cache in training), cost little next to a layer, and so never cross a stage boundary, where
torch's pipelining would have to send them and compute gradients for them.

Word embeddings are untied (``tie_word_embeddings=False``): a tied ``lm_head`` would share its
weight with stage 0's embedding, which a pipeline split on separate ranks cannot do.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

# Decoder-only families whose layers take (hidden, attention_mask, position_ids, position_embeddings)
# and whose inner model owns ``rotary_emb``; masks per ``config.layer_types`` as their own forward does.
ARCHS = ("llama", "qwen2", "qwen3")


class PipelineCausalLM(nn.Module):
    """HF's ``XForCausalLM`` modules under its names, with a forward that runs whichever parts are present."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.config = hf_model.config
        self.model = hf_model.model  # embed_tokens, layers, norm, rotary_emb
        self.lm_head = hf_model.lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        inner = self.model
        h = inner.embed_tokens(x) if inner.embed_tokens is not None else x
        if inner.layers is not None and len(inner.layers):
            positions = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
            mask_args = dict(config=self.config, inputs_embeds=h, attention_mask=None, past_key_values=None,
                             position_ids=positions)
            masks = {"full_attention": create_causal_mask(**mask_args)}
            layer_types = getattr(self.config, "layer_types", None) or []
            if "sliding_attention" in layer_types:
                masks["sliding_attention"] = create_sliding_window_causal_mask(**mask_args)
            rope = inner.rotary_emb(h, positions)
            # Keys are the whole model's layer indices: split_by_fqns turns the ModuleList into a ModuleDict.
            items = inner.layers.items() if isinstance(inner.layers, nn.ModuleDict) else enumerate(inner.layers)
            for index, layer in items:
                kind = layer_types[int(index)] if layer_types else "full_attention"
                h = layer(h, attention_mask=masks[kind], position_ids=positions, position_embeddings=rope)
        h = inner.norm(h) if inner.norm is not None else h
        h = self.lm_head(h) if self.lm_head is not None else h
        # torch's split backward (stage_backward_input) ends with ``output.detach_()``, which raises
        # "Can't detach views in-place" on a view; a stage holding no layer and no norm/head would
        # hand back its input (or a view of it), so such an output is copied.
        return h.clone() if h._is_view() or h is x else h


def hf_model(arch: str = "llama", layers: int = 4, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
             vocab_size: int = 256, seq_len: int = 32, dtype: str = "float32", seed: int = 0, ffn_hidden: int = 0,
             **config_overrides) -> nn.Module:
    """A randomly initialised HF ``XForCausalLM`` of family ``arch``, from a config alone
    (``ffn_hidden`` 0: about 8/3 of ``hidden``; ``config_overrides`` go to the config, e.g.
    ``use_sliding_window=True``)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    config = AutoConfig.for_model(
        arch, vocab_size=vocab_size, hidden_size=hidden, intermediate_size=ffn_hidden or 8 * ((8 * hidden // 3 + 7) // 8),
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=hidden // heads, max_position_embeddings=seq_len, tie_word_embeddings=False,
        attn_implementation="sdpa", **config_overrides,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # dtype here, not .to(dtype): HF keeps the rotary inverse frequencies in float32, as from_pretrained does
        return AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))


def fqns_per_stage(n_layers: int, n_stages: int) -> list[list[str]]:
    """Module names per stage in NeMo AutoModel's HF form (``generate_hf_model_fqn_per_model_part``):
    earlier stages take the remainder layers, rotary embeddings on every stage."""
    if not 1 <= n_stages <= n_layers:
        raise ValueError(f"n_stages must be between 1 and the {n_layers} layers, got {n_stages}")
    per, extra = divmod(n_layers, n_stages)
    parts, first = [], 0
    for s in range(n_stages):
        count = per + (s < extra)
        parts.append([f"model.layers.{i}" for i in range(first, first + count)] + ["model.rotary_emb"])
        first += count
    parts[0].insert(0, "model.embed_tokens")
    parts[-1] += ["model.norm", "lm_head"]
    return parts


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def stages(n_stages: int = 2, microbatch_size: int = 4, dtype: str = "float32", arch: str = "llama",
           layers: int = 4, hidden: int = 64, heads: int = 4, kv_heads: int = 2, seq_len: int = 32,
           vocab_size: int = 256, ffn_hidden: int = 0) -> dict:
    """The `schedc profile --model` factory: the model with a split rule, a sample microbatch, the loss."""
    model = PipelineCausalLM(hf_model(arch, layers, hidden, heads, kv_heads, vocab_size, seq_len, dtype,
                                      ffn_hidden=ffn_hidden))
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab_size, (microbatch_size, seq_len + 1), generator=gen)
    return {
        "model": model,
        "split": fqns_per_stage(layers, n_stages),
        "sample": tokens[:, :-1],
        "target": tokens[:, 1:],
        "loss_fn": lm_loss,
        "name": f"hf-{arch}(layers={layers}, hidden={hidden}, heads={heads}/{kv_heads}, seq={seq_len}, "
                f"vocab={vocab_size})",
    }
