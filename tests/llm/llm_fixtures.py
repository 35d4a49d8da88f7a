"""Writes small random-weight GGUF models with the reference `gguf` writer, for every architecture and GGML type.

Quantized tensors are random blocks with small finite fp16 scales (any bytes are a valid quantized tensor), so
every type tg-llm decodes can be a weight. Llama q/k rows are written permuted the way llama.cpp's converter
permutes Hugging Face weights; `llm_reference.py` undoes it and applies Hugging Face's rotate-half RoPE.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

QT = gguf.GGMLQuantizationType
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# types whose blocks hold 256 elements: the model's rows must be a multiple of that
K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")
# ChatML that lists the tools in a system turn (the tiny models' own template has no place for them)
CHATML_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}" + CHATML_TEMPLATE
)
# fp16 field offsets per quantized type (forced small and finite)
HALF_OFFSETS = {
    "Q4_0": [0],
    "Q4_1": [0, 2],
    "Q5_0": [0],
    "Q5_1": [0, 2],
    "Q8_0": [0],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
    "MXFP4": [],
    "Q2_K": [80, 82],
    "Q3_K": [108],
    "IQ4_NL": [0],
    "IQ4_XS": [0],
}


def llama_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: Hugging Face's half-split q/k rows -> interleaved pairs, per head."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def byte_vocab() -> tuple[list[str], list[str], list[int]]:
    from tg.llm.tokenizer import byte_to_unicode

    chars = [byte_to_unicode()[b] for b in range(256)]
    merges = ["Ġ t", "h e", "Ġt he", "i n"]
    tokens = chars + [m.replace(" ", "") for m in merges] + SPECIALS
    types = [1] * (len(tokens) - len(SPECIALS)) + [3] * len(SPECIALS)
    return tokens, merges, types


def random_tensor(rng: np.random.Generator, shape: tuple[int, ...], type_name: str, scale: float) -> tuple:
    """(data, raw_dtype) for the writer: float arrays for float types, random blocks for quantized ones."""
    if type_name in ("F32", "F16"):
        return (rng.standard_normal(shape) * scale).astype(np.float32 if type_name == "F32" else np.float16), None
    block_elements, block_bytes = gguf.GGML_QUANT_SIZES[QT[type_name]]
    rows = int(np.prod(shape[:-1]))
    blocks = shape[-1] // block_elements
    raw = rng.integers(0, 256, size=(rows, blocks, block_bytes), dtype=np.uint8)
    for offset in HALF_OFFSETS[type_name]:
        halves = (rng.uniform(0.2, 1.0, size=(rows, blocks)) * scale / 8).astype(np.float16)
        raw[..., offset : offset + 2] = halves.view(np.uint8).reshape(rows, blocks, 2)
    if type_name == "MXFP4":
        raw[..., 0] = rng.integers(120, 124, size=(rows, blocks))  # scales 2**-8 .. 2**-5
    return raw.reshape(*shape[:-1], blocks * block_bytes), QT[type_name]


def write_model(
    path: Path,
    arch: str = "llama",
    weight_type: str = "F32",
    seed: int = 0,
    dim: int = 64,
    tied: bool = True,
    rope_freqs: np.ndarray | None = None,
    rope_scaling: tuple[str, float] | None = None,
    context: int = 256,
    experts: int = 4,
    sliding_window: int = 8,
    extra_tensors: dict[str, np.ndarray] | None = None,
) -> Path:
    """A 2-block model of `arch` with every matrix in `weight_type` (norms and the router stay F32); a mixture of
    experts (qwen3moe, olmoe) has `experts` experts, 2 used per token.

    `rope_freqs` is written as the `rope_freqs.weight` tensor (Llama 3.x's per-pair frequency divisors) and
    `rope_scaling` as the `<arch>.rope.scaling.type` and `.factor` keys.

    gemma3: head_dim 32 (`key_length`, not dim / heads), attention scale 0.125 (`attention.scale`), RoPE base 1e6
    for the global blocks, block 0 attending over a sliding window of `sliding_window` positions and block 1
    globally (`sliding_window_pattern` 2), q/k norms per head and norms after the attention and the MLP; its norm
    weights are around 1 like every model's here (the GGUF file holds Gemma's 1 + w, llama.cpp's converter adds the
    1). gemma2: the same without the q/k norms, the scale, the pattern key (Gemma 2 alternates by itself) or a RoPE
    base of its own, with soft caps small enough to matter (scores 2, logits 10). phi3: q, k, v as one `attn_qkv`,
    gate and up as one `ffn_up` (gate's rows first), every block over the sliding window, an untied output."""
    rng = np.random.default_rng(seed)
    if weight_type in K_QUANTS:
        dim = max(dim, 256)
    heads, kv_heads, hidden = 4, 2, 2 * dim if weight_type not in K_QUANTS else 256
    gemma = arch in ("gemma2", "gemma3")
    head_dim = 32 if gemma else dim // heads
    tied = tied and arch != "phi3"
    tokens, merges, types = byte_vocab()
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{arch}-{weight_type}")
    writer.add_block_count(2)
    writer.add_context_length(context)
    writer.add_embedding_length(dim)
    writer.add_feed_forward_length(hidden)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(1e6 if arch == "gemma3" else 10000.0)
    if gemma:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    else:
        writer.add_rope_dimension_count(head_dim)
    if arch in ("gemma2", "gemma3", "phi3"):
        writer.add_sliding_window(sliding_window)
    if arch == "gemma3":
        writer.add_sliding_window_pattern(2)
        writer.add_attention_scale(0.125)  # not 1/sqrt(head_dim): the scale must come from the file
    if arch == "gemma2":
        writer.add_float32("gemma2.attn_logit_softcapping", 2.0)
        writer.add_float32("gemma2.final_logit_softcapping", 10.0)
    if rope_scaling is not None:
        writer.add_string(f"{arch}.rope.scaling.type", rope_scaling[0])
        writer.add_float32(f"{arch}.rope.scaling.factor", rope_scaling[1])
    if arch in ("qwen3moe", "olmoe"):
        writer.add_expert_count(experts)
        writer.add_expert_used_count(2)
        writer.add_expert_feed_forward_length(hidden)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if arch.startswith("qwen") else "llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types(types)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    def matrix(name: str, shape: tuple[int, ...], scale: float = 0.1, permute_heads: int = 0) -> None:
        data, raw_dtype = random_tensor(rng, shape, weight_type, scale)
        if permute_heads and raw_dtype is None:
            data = llama_permute(data, permute_heads)
        elif permute_heads:  # rows of blocks permute like rows of values
            data = llama_permute(data, permute_heads)
        writer.add_tensor(name, data, raw_dtype=raw_dtype)

    def norm(name: str, size: int) -> None:
        writer.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(size)).astype(np.float32))

    vocab = len(tokens)
    writer.add_tensor("token_embd.weight", (rng.standard_normal((vocab, dim)) * 0.5).astype(np.float32))
    norm("output_norm.weight", dim)
    if rope_freqs is not None:
        writer.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    for name, values in (extra_tensors or {}).items():  # written as F32
        writer.add_tensor(name, values.astype(np.float32))
    if not tied:
        matrix("output.weight", (vocab, dim))
    interleave = arch == "llama"
    for block in range(2):
        prefix = f"blk.{block}."
        norm(prefix + "attn_norm.weight", dim)
        norm(prefix + "ffn_norm.weight", dim)
        if arch == "phi3":  # random rows either way: the fused matrix is q's rows, then k's, then v's
            matrix(prefix + "attn_qkv.weight", ((heads + 2 * kv_heads) * head_dim, dim))
        else:
            matrix(prefix + "attn_q.weight", (heads * head_dim, dim), permute_heads=heads if interleave else 0)
            matrix(prefix + "attn_k.weight", (kv_heads * head_dim, dim), permute_heads=kv_heads if interleave else 0)
            matrix(prefix + "attn_v.weight", (kv_heads * head_dim, dim))
        matrix(prefix + "attn_output.weight", (dim, heads * head_dim))
        if arch == "qwen2":
            for name, size in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
                writer.add_tensor(f"{prefix}attn_{name}.bias", (rng.standard_normal(size) * 0.1).astype(np.float32))
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            norm(prefix + "attn_q_norm.weight", head_dim)
            norm(prefix + "attn_k_norm.weight", head_dim)
        if gemma:
            norm(prefix + "post_attention_norm.weight", dim)
            norm(prefix + "post_ffw_norm.weight", dim)
        if arch == "olmoe":
            norm(prefix + "attn_q_norm.weight", heads * head_dim)
            norm(prefix + "attn_k_norm.weight", kv_heads * head_dim)
        if arch in ("qwen3moe", "olmoe"):
            writer.add_tensor(prefix + "ffn_gate_inp.weight", rng.standard_normal((experts, dim)).astype(np.float32))
            matrix(prefix + "ffn_gate_exps.weight", (experts, hidden, dim))
            matrix(prefix + "ffn_up_exps.weight", (experts, hidden, dim))
            matrix(prefix + "ffn_down_exps.weight", (experts, dim, hidden))
        elif arch == "phi3":
            matrix(prefix + "ffn_up.weight", (2 * hidden, dim))
            matrix(prefix + "ffn_down.weight", (dim, hidden))
        else:
            matrix(prefix + "ffn_gate.weight", (hidden, dim))
            matrix(prefix + "ffn_up.weight", (hidden, dim))
            matrix(prefix + "ffn_down.weight", (dim, hidden))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def chunked_logits(path: Path, tokens: list[int], chunk_ends: tuple[int, ...]) -> tuple[list[int], np.ndarray]:
    """(positions, tg-llm's logits there) for the model at `path`: `tokens` fed in prefill chunks that end at
    `chunk_ends` (16 tokens or more: captured block forwards), then one decode step per token left."""
    from tg.llm.generate import Generator
    from tg.llm.model import load_model

    model, _ = load_model(path, max_context=64)
    generator = Generator(model)
    positions, rows, start = [], [], 0
    for end in chunk_ends:
        rows.append(generator._forward(tokens[start:end], start))
        positions.append(end - 1)
        start = end
    for position in range(start, len(tokens)):
        rows.append(generator._forward([tokens[position]], position))
        positions.append(position)
    return positions, np.stack(rows)
