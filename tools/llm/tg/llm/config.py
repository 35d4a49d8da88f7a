"""The transformer hyper-parameters of a GGUF model, read from its `<arch>.*` metadata keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "olmoe")
# architectures whose GGUF q/k weights were permuted by llama.cpp's converter so RoPE rotates adjacent pairs
INTERLEAVED_ROPE = ("llama",)
# per-architecture default for renormalizing the top-k expert weights when the file does not say
NORMALIZE_TOP_K = {"qwen3moe": True, "olmoe": False}


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
        return cls(
            architecture=arch,
            num_blocks=int(key("block_count")),
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
        )


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
