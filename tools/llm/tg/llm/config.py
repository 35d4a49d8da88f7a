"""The transformer hyper-parameters of a GGUF model, read from its `<arch>.*` metadata keys."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# what the KV cache can store keys and values as (`--kv-cache`), each the name of its dtype: float16 halves the
# bytes a decode step's attention reads (llama.cpp's default, F16), int8 quarters them (plus a float32 scale per
# block of 32, as llama.cpp's q8_0, see tg.llm.kv_quant); keys and values are rounded once, when stored, and
# attention converts what it reads to float32 and computes in float32
KV_CACHE_TYPES = {"f32": "float32", "f16": "float16", "q8": "int8"}
# float32 by default: float16 moved Gemma 3 270M's logits more than 4e-3 from transformers' float32 run, past the
# 3e-3 that tests/llm/test_gemma3_real.py allows (its greedy tokens stayed the same)
DEFAULT_KV_CACHE = "f32"


def check_kv_cache(name: str) -> str:
    """`name` if it is one of KV_CACHE_TYPES, else a ValueError that lists them."""
    if name not in KV_CACHE_TYPES:
        raise ValueError(f"unknown KV cache type {name!r} (--kv-cache): choose one of {', '.join(KV_CACHE_TYPES)}")
    return name


# how a decode step's quantized matvecs multiply: "float" (the weights decoded to float32, tg.llm.lanes), or "int8"
# (the activations quantized to int8 per block of 32 and integer dot products, tg.llm.int8_matvec: Q4_1 and Q8_0
# weights on a CPU with AVX-512 VNNI). float by default: int8's rounding changed Gemma 3 270M's greedy answers
# (tests/llm/test_gemma3_real.py), as llama.cpp's does
MATVEC_TYPES = ("float", "int8")
DEFAULT_MATVEC = "float"


def check_matvec(name: str) -> str:
    """`name` if it is one of MATVEC_TYPES, else a ValueError that lists them."""
    if name not in MATVEC_TYPES:
        raise ValueError(f"unknown matvec {name!r} (--matvec): choose one of {', '.join(MATVEC_TYPES)}")
    return name


SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "olmoe", "gemma2", "gemma3", "phi3")
# architectures whose GGUF q/k weights were permuted by llama.cpp's converter so RoPE rotates adjacent pairs
INTERLEAVED_ROPE = ("llama",)
# per-architecture default for renormalizing the top-k expert weights when the file does not say
NORMALIZE_TOP_K = {"qwen3moe": True, "olmoe": False}
# the MLP's activation of the gate projection (silu unless listed)
FFN_ACTIVATIONS = {"gemma2": "gelu_tanh", "gemma3": "gelu_tanh"}
# Facts the GGUF files do not carry (llama.cpp and transformers both fix them), for models whose metadata has
# `<arch>.attention.sliding_window`: which blocks attend over that window (unless
# `<arch>.attention.sliding_window_pattern` says otherwise): of every n blocks the first n - 1, or all for 0 (Gemma 3:
# 5 of 6, Gemma 2: every other one, Phi-3: all). Gemma 3's sliding blocks rotate with RoPE base 10,000, its global
# ones with `rope.freq_base` (the others' blocks all with `rope.freq_base`). Gemma scales its embeddings by sqrt(dim).
SLIDING_WINDOW_PATTERN = {"gemma2": 2, "gemma3": 6, "phi3": 0}
LOCAL_ROPE_THETA = {"gemma3": 10000.0}
SCALED_EMBEDDINGS = ("gemma2", "gemma3")
# Gemma 2 and 3 27B scale their attention scores by 1/sqrt(dim / heads) (their query_pre_attn_scalar, 144 and 168),
# not by 1/sqrt(head_dim) as the other sizes do; llama.cpp recognises them by their block count, as here
GEMMA_27B_BLOCKS = {"gemma2": 46, "gemma3": 62}


class UnsupportedModelError(ValueError):
    """The GGUF file describes a model tg-llm cannot run."""


@dataclass(frozen=True)
class TransformerConfig:
    architecture: str
    num_blocks: int
    dim: int
    hidden_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    norm_eps: float
    vocab_size: int
    rope_theta: float
    rope_dim: int
    rope_interleaved: bool
    context_length: int
    # RoPE scaling from the metadata: "none" or "linear" (positions divided by rope_scaling_factor). Llama 3.x's
    # frequency-dependent scaling is not metadata but a tensor, `rope_freqs.weight` (see rope_frequencies).
    rope_scaling: str = "none"
    rope_scaling_factor: float = 1.0
    num_experts: int = 0
    num_experts_per_tok: int = 0
    normalize_top_k: bool = False
    ffn_activation: str = "silu"  # or "gelu_tanh"
    embedding_scale: float = 1.0  # the token embeddings are multiplied by it
    attention_scale: float = 0.0  # the attention scores' factor; 0: 1/sqrt(head_dim)
    # sliding-window attention: the blocks in local_blocks see the last `sliding_window` positions only (their own
    # included) and, where local_rope_theta is set, rotate with that RoPE base, unscaled
    sliding_window: int = 0
    local_blocks: tuple[int, ...] = ()
    local_rope_theta: float = 0.0  # 0: the sliding-window blocks rotate as the others do
    # Gemma 2's soft caps: scores (before the mask) and final logits become cap * tanh(value / cap); 0 is none
    attention_softcap: float = 0.0
    final_softcap: float = 0.0

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], vocab_size: int) -> TransformerConfig:
        arch = metadata.get("general.architecture", "")
        if arch not in SUPPORTED_ARCHITECTURES:
            supported = ", ".join(SUPPORTED_ARCHITECTURES)
            raise UnsupportedModelError(f"architecture {arch!r} is not supported (supported: {supported})")

        def key(name: str, default: Any = None) -> Any:
            value = metadata.get(f"{arch}.{name}", default)
            if value is None:
                raise UnsupportedModelError(f"the GGUF metadata lacks {arch}.{name}")
            return value

        dim, n_heads = int(key("embedding_length")), int(key("attention.head_count"))
        head_dim = int(key("attention.key_length", dim // n_heads))
        num_experts = int(key("expert_count", 0))
        rope_scaling, rope_scaling_factor = _rope_scaling(metadata, arch)
        hidden = key("expert_feed_forward_length", None) if num_experts else None
        num_blocks = int(key("block_count"))
        sliding_window = int(key("attention.sliding_window", 0)) if arch in SLIDING_WINDOW_PATTERN else 0
        return cls(
            architecture=arch,
            num_blocks=num_blocks,
            dim=dim,
            hidden_dim=int(hidden if hidden is not None else key("feed_forward_length")),
            n_heads=n_heads,
            n_kv_heads=int(key("attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            norm_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
            vocab_size=int(key("vocab_size", vocab_size)),
            rope_theta=float(key("rope.freq_base", 10000.0)),
            rope_dim=int(key("rope.dimension_count", head_dim)),
            rope_interleaved=arch in INTERLEAVED_ROPE,
            context_length=int(key("context_length", 4096)),
            rope_scaling=rope_scaling,
            rope_scaling_factor=rope_scaling_factor,
            num_experts=num_experts,
            num_experts_per_tok=int(key("expert_used_count", 0)),
            normalize_top_k=bool(key("expert_weights_norm", NORMALIZE_TOP_K.get(arch, False))),
            ffn_activation=FFN_ACTIVATIONS.get(arch, "silu"),
            embedding_scale=math.sqrt(dim) if arch in SCALED_EMBEDDINGS else 1.0,
            attention_scale=float(key("attention.scale", _attention_scale(arch, num_blocks, dim, n_heads))),
            sliding_window=sliding_window,
            local_blocks=_local_blocks(metadata, arch, num_blocks) if sliding_window else (),
            local_rope_theta=LOCAL_ROPE_THETA.get(arch, 0.0),
            attention_softcap=float(key("attn_logit_softcapping", 0.0)),
            final_softcap=float(key("final_logit_softcapping", 0.0)),
        )

    def attention_factor(self) -> float:
        """What the attention scores q.k are multiplied by before the softmax."""
        return self.attention_scale or 1.0 / math.sqrt(self.head_dim)


def _attention_scale(arch: str, num_blocks: int, dim: int, n_heads: int) -> float:
    """The attention scale when the metadata has no `<arch>.attention.scale`: 0 (1/sqrt(head_dim)) but for Gemma 2
    and 3 27B (see GEMMA_27B_BLOCKS)."""
    return 1.0 / math.sqrt(dim / n_heads) if num_blocks == GEMMA_27B_BLOCKS.get(arch) else 0.0


def _local_blocks(metadata: dict[str, Any], arch: str, num_blocks: int) -> tuple[int, ...]:
    """The blocks that attend over a sliding window: `<arch>.attention.sliding_window_pattern` is either a list (True:
    sliding) or a period n (the first n - 1 blocks of every n slide), by default the architecture's period."""
    pattern = metadata.get(f"{arch}.attention.sliding_window_pattern", SLIDING_WINDOW_PATTERN[arch])
    if isinstance(pattern, (list, tuple)):
        if len(pattern) != num_blocks:
            count = len(pattern)
            raise UnsupportedModelError(f"the sliding window pattern has {count} entries for {num_blocks} blocks")
        return tuple(index for index, sliding in enumerate(pattern) if sliding)
    period = int(pattern)
    return tuple(index for index in range(num_blocks) if period == 0 or index % period < period - 1)


# RoPE scaling types the model applies; "yarn" and "longrope" change attention as well as the angles.
SUPPORTED_ROPE_SCALING = ("none", "linear")


def _rope_scaling(metadata: dict[str, Any], arch: str) -> tuple[str, float]:
    """The `<arch>.rope.scaling.type` and `.factor` keys (llama.cpp's names); a factor of 1 (or none) is no scaling."""
    kind = str(metadata.get(f"{arch}.rope.scaling.type", "none")).lower()
    factor = float(metadata.get(f"{arch}.rope.scaling.factor", 1.0) or 1.0)
    if kind not in SUPPORTED_ROPE_SCALING:
        supported = ", ".join(SUPPORTED_ROPE_SCALING)
        raise UnsupportedModelError(f"RoPE scaling {kind!r} is not supported (supported: {supported})")
    if factor <= 0:
        raise UnsupportedModelError(f"the GGUF metadata gives a RoPE scaling factor of {factor}; it must be positive")
    return ("none", 1.0) if kind == "none" or factor == 1.0 else (kind, factor)
