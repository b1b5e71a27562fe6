"""Per-unit costs of a decoder-only transformer from arithmetic: a profile before the cluster exists.

Problem: choosing how to cut a model into pipeline stages (``schedc plan``) needs the cost of
every *unit* of the model (the embedding, each layer, the final norm + LM head + loss) before any
GPU runs it, as the run will hold and spend it: in the implementation that runs it (Hugging Face
transformers' modules, which NeMo AutoModel trains, or torchtitan's own), with its activation
checkpointing, dtypes, optimizer, data- and tensor-parallel degrees, sequence and microbatch.

Method: :func:`unit_profile` (its keywords) or :func:`count_units` (one
:class:`~schedc.core.settings.RunSettings`, resolved once by :func:`~schedc.model_costs.profile.resolve`,
whose ``assumes`` the profile records) returns a ``schedc.profile/v1`` :class:`~schedc.core.costs.Profile`
whose stages are the units in model order, each with ``modules`` (:data:`UNIT_NAMES`);
``Profile.merge(counts)`` turns it into the profile of any contiguous partition. With b =
microbatch size, s = sequence, h = hidden, q = heads x head_dim, k = kv_heads x head_dim, f = FFN
width, e = bytes per element of the activation dtype, V = vocabulary:

- time: forward FLOPs ``2 b s x params + 4 b s^2 q`` (Narayanan et al. 2021, "Efficient
  Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", sec. 5.1); I repeats
  the linears and doubles the attention core, W repeats the linears; MoE layers count the routed
  top-k experts and the router; checkpointing adds its recomputed forwards to I and W
  (:mod:`schedc.model_costs.memory`); over ``flops_per_second``. These are the FLOPs the real
  layers execute, less the attention scores a flash-style backward recomputes (Megatron's
  convention: attention's backward is 2 x its forward). The embedding is memory-bound
  (its rows read and written, its dense gradient written, over ``memory_bandwidth``).
- memory: the tensors the running code saves, per token (:mod:`schedc.model_costs.memory`):
  held after F (``activation_bytes``), held from I until W (``weight_grad_bytes``, larger: torch's
  split backward keeps the graph plus the output gradients W needs), the loss's fp32 logits, the
  new gradients W adds into those of earlier microbatches and B's peak as ``transient_bytes``, ``boundary_bytes`` = e b s h per boundary, ``reserve_bytes`` for what a
  CUDA process holds outside the allocator; ``impl="paper"`` keeps the textbook count
  (Korthikanti et al. 2022 sec. 4.1 without score terms; the zero-bubble paper's M_W with
  ``held="paper"``).
- static bytes per parameter: the weight in ``param_dtype`` + gradient (fp32 by default) + an
  fp32 master copy and the optimizer's states (AdamW: two; the K = 12 of Rajbhandari et al.
  2020, "ZeRO", sec. 3.1), divided by ``dp_shard`` and ``tp``; ``tp`` > 1 adds its collectives to F and I
  (:data:`schedc.model_costs.units.TP_COLLECTIVES`); with ``dp_shard`` > 1, plus what
  FSDP2 holds unsharded all step under torch's pipelining (:func:`fsdp_held`: the stage's weights
  in the compute dtype, its gradients unreduced). MoE layers hold all experts.

:func:`read_hf_config` reads a Hugging Face ``config.json`` whose ``model_type`` is one of
:data:`COUNTED_MODEL_TYPES` (Llama, Mistral, Qwen2/3, GPT-2, Mixtral, Qwen2/3-MoE); any other
(DeepSeek-V3, Gemma, Phi, ...) is refused by name, never counted as another layout.
Cost: O(layers).
"""

from schedc.model_costs.profile import (
    AC_MODES,
    COUNTED_FOR_TORCH,
    CUDA_RESERVE_BYTES,
    OPTIMIZER_STATES,
    UNIT_NAMES,
    count_units,
    fsdp_held,
    unit_names,
    unit_profile,
)
from schedc.model_costs.shape import (
    COUNTED_MODEL_TYPES,
    DTYPE_BYTES,
    FAMILIES,
    REFUSED,
    ModelShape,
    dtype_name,
    read_hf_config,
)

__all__ = ["AC_MODES", "COUNTED_FOR_TORCH", "count_units", "COUNTED_MODEL_TYPES", "CUDA_RESERVE_BYTES", "DTYPE_BYTES", "FAMILIES",
           "ModelShape", "OPTIMIZER_STATES", "REFUSED", "UNIT_NAMES", "dtype_name", "fsdp_held", "read_hf_config",
           "unit_names", "unit_profile"]
