"""The decoder-only transformer of llama, qwen2, qwen3, qwen3moe and olmoe GGUF models, on tg Tensors.

One `Transformer.forward(tokens, start_pos)` call runs a chunk of tokens through every block, writes their keys
and values into the per-block KV cache at `start_pos`, and returns the logits of the last token. Weights stay in
their GGUF encoding (see weights.py); activations and the KV cache are float32.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tg.codegen import dtypes
from tg.codegen.schedule.realize import whole_buffer
from tg.hcq import Device
from tg.hcq.engine.buffers import buffer_of
from tg.llm.config import TransformerConfig, UnsupportedModelError
from tg.llm.ops import concat, stack
from tg.llm.quants import DEQUANTIZERS
from tg.llm.weights import SCRATCH_MATMUL_ROWS, EmbeddingTable, Weight, linear, quantized_weight
from tg.tensor import Tensor
from tg.tensor.gguf import FLOAT_TYPES, GGML_TYPES, GGUFFile, GGUFTensorInfo, gguf_read, load_tensor, mapped_tensors
from tg.tensor.jit import TinyJit


class ContextOverflowError(ValueError):
    """More tokens than the KV cache holds."""


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * ((x * x).mean(-1, keepdim=True) + eps).rsqrt() * weight


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, rope_dim: int, interleaved: bool) -> Tensor:
    """Rotate the first `rope_dim` features of x `(T, heads, head_dim)`.

    `interleaved` rotates adjacent pairs (2i, 2i+1): llama.cpp's converter permutes llama's q/k rows so that this
    equals Hugging Face's rotate-half on the original weights. Otherwise the halves (i, i + rope_dim/2) rotate
    (the NEOX layout qwen models keep).
    """
    rotated, rest = x[..., :rope_dim], x[..., rope_dim:]
    if interleaved:
        pairs = rotated.unflatten(-1, (rope_dim // 2, 2))
        first, second = pairs[..., 0], pairs[..., 1]
        out = stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)
    else:
        first, second = rotated[..., : rope_dim // 2], rotated[..., rope_dim // 2 :]
        out = concat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return out if rest.shape[-1] == 0 else concat([out, rest], dim=-1)


def attend(q: Tensor, kv: Tensor, mask: Tensor, kv_heads: int) -> Tensor:
    """Grouped-query attention of q `(T, heads, head_dim)` over kv `(S, 2, kv_heads, head_dim)` where `mask`
    `(T, S)` is True; query head h reads key/value head h // (heads / kv_heads). Returns `(T, heads * head_dim)`."""
    count, heads, head_dim = q.shape
    group = heads // kv_heads
    q = q.reshape(count, kv_heads, group, head_dim).permute(1, 2, 0, 3).reshape(kv_heads, group * count, head_dim)
    keys, values = kv[:, 0].permute(1, 2, 0), kv[:, 1].transpose(0, 1)  # (kv, head_dim, S), (kv, S, head_dim)
    scores = (q.matmul(keys) * (1.0 / math.sqrt(head_dim))).reshape(kv_heads, group, count, -1)
    weights = mask.reshape(1, 1, *mask.shape).where(scores, -math.inf).softmax(-1)
    out = weights.reshape(kv_heads, group * count, -1).matmul(values).reshape(kv_heads, group, count, head_dim)
    return out.permute(2, 0, 1, 3).reshape(count, heads * head_dim)


def top_k_mask(scores: Tensor, k: int) -> Tensor:
    """True for the k largest of each row `(T, E)`; ties go to the lower index (rank by pairwise comparison)."""
    experts = scores.shape[-1]
    mine, theirs = scores.unsqueeze(-1), scores.unsqueeze(-2)  # (T, E, 1) vs (T, 1, E)
    index = Tensor.arange(experts, dtype=dtypes.int32)
    lower = index.reshape(1, experts) < index.reshape(experts, 1)  # [i, j]: j < i
    beats_me = (theirs > mine) | ((theirs == mine) & lower)
    rank = beats_me.cast(dtypes.int32).sum(-1)
    return rank < k


@dataclass
class Block:
    attn_norm: Tensor
    q: Weight | None  # None when the file's q, k, v are fused into `qkv` (see FUSED_PROJECTIONS)
    k: Weight | None
    v: Weight | None
    output: Weight
    ffn_norm: Tensor
    q_bias: Tensor | None = None
    k_bias: Tensor | None = None
    v_bias: Tensor | None = None
    q_norm: Tensor | None = None
    k_norm: Tensor | None = None
    gate: Weight | None = None
    up: Weight | None = None
    down: Weight | None = None
    router: Weight | None = None
    gate_experts: Weight | None = None
    up_experts: Weight | None = None
    down_experts: Weight | None = None
    qkv: Weight | None = None
    qkv_bias: Tensor | None = None
    gate_up: Weight | None = None


def kv_window(start_pos: int, max_context: int) -> int:
    """How many cached positions a step starting at `start_pos` attends over: 0, 64, 128, then the multiple of 128
    at or above start_pos (at most max_context). Steps in one window run identical kernels, so one TinyJit capture
    per window serves every position in it; the positions from start_pos on are masked. Windows of 128 keep the
    keys and values read in vain below 128 positions, while a new window (one step scheduled and captured) comes
    at most every 128 tokens."""
    if start_pos == 0:
        return 0
    window = 64 if start_pos <= 64 else -(-start_pos // 128) * 128
    return min(max_context, window)


def write_cache_rows(cache: Tensor, rows: memoryview, start_pos: int) -> None:
    """Copy `rows`, the bytes of whole cache rows `(count, 2, kv_heads, head_dim)`, into the realized KV cache
    `cache` `(max_context, 2, kv_heads, head_dim)` from position start_pos on (position-major: one contiguous run)."""
    itemsize = cache.dtype.itemsize
    target = buffer_of(whole_buffer(cache.uop))
    offset = start_pos * math.prod(cache.shape[1:]) * itemsize
    target.view(rows.nbytes // itemsize, cache.dtype, offset).copyin(rows)


def release_cached_memory(device: str) -> None:
    """Give the memory of freed buffers back to the system: the allocator keeps freed blocks for reuse, and
    glibc keeps freed heap pages. After a prefill chunk those are its float scratch weights (tens of MB, see
    weights.linear), which the decode steps that follow never reuse."""
    allocator = Device[device].allocator
    if hasattr(allocator, "free_cache"):
        allocator.free_cache()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only
    if trim is not None:
        trim(0)


class Transformer:
    """A GGUF decoder model with its KV cache (one sequence, batch 1).

    The cache of a block is `(max_context, 2, kv_heads, head_dim)`: position-major, so the keys and values of new
    positions are one contiguous run of memory, written by a copy after each step (`_store`). The step itself is a
    function of Tensors only (token rows, RoPE rows, mask), its shapes fixed by the token count and the KV window,
    so TinyJit captures the one-token step once per window and replays it for every position.
    """

    def __init__(
        self, config: TransformerConfig, weights: dict[str, Weight], max_context: int, embedding: EmbeddingTable
    ) -> None:
        self.config, self.weights, self.embedding_table = config, weights, embedding
        self.max_context = min(max_context, config.context_length)
        self.embedding = weights["token_embd.weight"]
        self.output_norm = weights["output_norm.weight"].float()
        self.output = weights.get("output.weight", self.embedding)  # tied embeddings when there is no output
        self.blocks = [self._block(index) for index in range(config.num_blocks)]
        cache_shape = (self.max_context, 2, config.n_kv_heads, config.head_dim)
        self.caches = [Tensor.zeros(*cache_shape).contiguous().realize() for _ in self.blocks]
        frequencies = config.rope_theta ** (-np.arange(0, config.rope_dim, 2, dtype=np.float64) / config.rope_dim)
        angles = np.arange(self.max_context, dtype=np.float64)[:, None] * frequencies[None, :]
        self.rope_cos, self.rope_sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        self.steps: dict[int, TinyJit] = {}  # KV window -> the captured one-token step

    def _block(self, index: int) -> Block:
        def get(name: str) -> Weight | None:
            return self.weights.get(f"blk.{index}.{name}")

        def floats(name: str) -> Tensor | None:
            weight = get(name)
            return None if weight is None else weight.float().realize()

        projections = [] if get("attn_qkv.weight") else ["attn_q.weight", "attn_k.weight", "attn_v.weight"]
        required = ["attn_norm.weight", *projections, "attn_output.weight", "ffn_norm.weight"]
        missing = [name for name in required if get(name) is None]
        if missing:
            raise UnsupportedModelError(f"block {index} lacks tensors {', '.join(missing)}")
        block = Block(
            attn_norm=floats("attn_norm.weight"),
            q=get("attn_q.weight"),
            k=get("attn_k.weight"),
            v=get("attn_v.weight"),
            output=get("attn_output.weight"),
            ffn_norm=floats("ffn_norm.weight"),
            q_bias=floats("attn_q.bias"),
            k_bias=floats("attn_k.bias"),
            v_bias=floats("attn_v.bias"),
            q_norm=floats("attn_q_norm.weight"),
            k_norm=floats("attn_k_norm.weight"),
            qkv=get("attn_qkv.weight"),
        )
        biases = [block.q_bias, block.k_bias, block.v_bias]
        if block.qkv is not None and all(bias is not None for bias in biases):
            block.qkv_bias = concat(biases, dim=0).realize()  # type: ignore[arg-type]
        if self.config.num_experts:
            block.router, block.gate_experts = get("ffn_gate_inp.weight"), get("ffn_gate_exps.weight")
            block.up_experts, block.down_experts = get("ffn_up_exps.weight"), get("ffn_down_exps.weight")
        else:
            block.gate, block.up, block.down = get("ffn_gate.weight"), get("ffn_up.weight"), get("ffn_down.weight")
            block.gate_up = get("ffn_gate_up.weight")
        return block

    # ------------------------------------------------------------------------------------------- the forward

    def forward(self, tokens: list[int], start_pos: int) -> Tensor:
        """Logits `(vocab,)` of the last of `tokens`, which sit at positions start_pos.. of the sequence; their
        keys and values go into the KV cache. Runs the step through TinyJit (JIT=0: plainly every time)."""
        count = len(tokens)
        if start_pos + count > self.max_context:
            raise ContextOverflowError(
                f"context overflow: {start_pos + count} tokens do not fit the maximum context of {self.max_context}"
            )
        window = kv_window(start_pos, self.max_context)
        step = self._jitted_step(window) if count == 1 else functools.partial(self._step, window)
        positions = slice(start_pos, start_pos + count)
        cos, sin = Tensor(self.rope_cos[positions, None, :]), Tensor(self.rope_sin[positions, None, :])
        cached_visible = np.arange(window)[None, :] < start_pos
        mask = np.concatenate([np.broadcast_to(cached_visible, (count, window)), np.tri(count, dtype=bool)], axis=1)
        logits, *new_kv = step(cos, sin, Tensor(mask), *self.embedding_table.inputs(tokens))
        self._store(new_kv, start_pos)
        if count >= SCRATCH_MATMUL_ROWS:
            release_cached_memory(self.caches[0].device)
        return logits

    def _jitted_step(self, window: int) -> TinyJit:
        """The one-token step over `window` cached positions, captured once and replayed for every position.

        Only single-token steps are captured: a capture keeps every buffer its kernels use, and a prefill chunk's
        (its float scratch weights included, see weights.linear) would hold tens of MB per chunk length."""
        if window not in self.steps:
            # the step does the same work every call (weights and caches are realized at load), so the first call
            # is captured: a short answer would otherwise spend two of its steps scheduling per window
            self.steps[window] = TinyJit(functools.partial(self._step, window), plain_calls=0)
        return self.steps[window]

    def _store(self, new_kv: list[Tensor], start_pos: int) -> None:
        """Copy each block's new keys and values `(count, 2, kv_heads, head_dim)` into its cache at start_pos."""
        for cache, values in zip(self.caches, new_kv, strict=True):
            write_cache_rows(cache, values.data(), start_pos)

    def _step(self, window: int, cos: Tensor, sin: Tensor, mask: Tensor, *token_rows: Tensor) -> list[Tensor]:
        """[logits of the last token, then each block's new keys and values]: the function TinyJit captures."""
        config = self.config
        x = self.embedding_table.decode(list(token_rows))
        count, new_kv = x.shape[0], []
        for block, cache in zip(self.blocks, self.caches, strict=True):
            attended, kv = self._attention(
                block, cache[:window], rms_norm(x, block.attn_norm, config.norm_eps), cos, sin, mask
            )
            h = x + attended
            x = h + self.feed_forward(block, rms_norm(h, block.ffn_norm, config.norm_eps))
            # one realize per block keeps each graph small, and every block's graph has the same structure, so
            # the scheduler's cache serves blocks 2..N from block 1's schedule
            x = x.contiguous()  # kv is a buffer already (see _attention)
            Tensor.realize(x, kv)
            new_kv.append(kv)
        last = rms_norm(x[count - 1 :], self.output_norm, config.norm_eps)
        return [linear(last, self.output).reshape(-1).realize(), *new_kv]

    def _attention(
        self, block: Block, cached: Tensor, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """(attention output, the new keys and values `(T, 2, kv_heads, head_dim)`); `cached` is the KV window
        `(window, 2, kv_heads, head_dim)` and `mask` `(T, window + T)` says which keys each query sees."""
        q, k, v = self.rotated_qkv(block, x, cos, sin)
        # (T, 2, kv_heads, head_dim), in a buffer: fused into the attention, the keys' RoPE was recomputed (gated
        # by the concat) for every cached position and head, which made the scores kernel 20x slower
        new_kv = stack([k, v], dim=1).contiguous()
        all_kv = new_kv if cached.shape[0] == 0 else concat([cached, new_kv], dim=0)
        return linear(attend(q, all_kv, mask, self.config.n_kv_heads), block.output), new_kv

    def rotated_qkv(self, block: Block, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The queries `(T, heads, head_dim)`, keys and values `(T, kv_heads, head_dim)` of the rows of x: projected,
        q/k-normed where the model has those norms, and rotated by the RoPE rows cos, sin `(T, 1, rope_dim / 2)`."""
        config, count = self.config, x.shape[0]
        q, k, v = self._qkv(block, x)
        if block.q_norm is not None and block.q_norm.shape[-1] != config.head_dim:  # olmoe: over the projection
            q, k = rms_norm(q, block.q_norm, config.norm_eps), rms_norm(k, block.k_norm, config.norm_eps)
        q = q.reshape(count, config.n_heads, config.head_dim)
        k = k.reshape(count, config.n_kv_heads, config.head_dim)
        v = v.reshape(count, config.n_kv_heads, config.head_dim)
        if block.q_norm is not None and block.q_norm.shape[-1] == config.head_dim:  # qwen3: per head
            q, k = rms_norm(q, block.q_norm, config.norm_eps), rms_norm(k, block.k_norm, config.norm_eps)
        q = apply_rope(q, cos, sin, config.rope_dim, config.rope_interleaved)
        k = apply_rope(k, cos, sin, config.rope_dim, config.rope_interleaved)
        return q, k, v

    def _qkv(self, block: Block, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if block.qkv is None:
            assert block.q is not None and block.k is not None and block.v is not None
            return linear(x, block.q, block.q_bias), linear(x, block.k, block.k_bias), linear(x, block.v, block.v_bias)
        config = self.config
        qkv = linear(x, block.qkv, block.qkv_bias)
        q_end = config.n_heads * config.head_dim
        k_end = q_end + config.n_kv_heads * config.head_dim
        return qkv[..., :q_end], qkv[..., q_end:k_end], qkv[..., k_end:]

    def feed_forward(self, block: Block, x: Tensor) -> Tensor:
        if block.gate_up is not None:
            gate_up = linear(x, block.gate_up)
            hidden = gate_up.shape[-1] // 2
            return linear(gate_up[..., :hidden].silu() * gate_up[..., hidden:], block.down)
        if not self.config.num_experts:
            return linear(linear(x, block.gate).silu() * linear(x, block.up), block.down)
        config = self.config
        probabilities = linear(x, block.router).softmax(-1)  # (T, experts)
        chosen = top_k_mask(probabilities, config.num_experts_per_tok)
        weights = chosen.where(probabilities, 0.0)
        if config.normalize_top_k:
            weights = weights / weights.sum(-1, keepdim=True)
        # every expert runs on every token and unchosen ones get weight 0 (exact, but E/k times the work)
        inputs = x.unsqueeze(0)  # (1, T, dim)
        gate = inputs.matmul(block.gate_experts.float().transpose(-1, -2))  # (E, T, hidden)
        up = inputs.matmul(block.up_experts.float().transpose(-1, -2))
        expert_out = (gate.silu() * up).matmul(block.down_experts.float().transpose(-1, -2))  # (E, T, dim)
        return (expert_out * weights.transpose(0, 1).unsqueeze(-1)).sum(0)


# ----------------------------------------------------------------------------------------------- loading


# projections that read the same input are stored as one matrix (rows stacked), so one matvec kernel (and one
# launch) computes them all; the model splits the output. Only same-typed members of equal row length are fused.
FUSED_PROJECTIONS = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "ffn_gate_up": ("ffn_gate", "ffn_up")}


def fused_groups(gguf: GGUFFile) -> dict[str, tuple[str, list[str]]]:
    """{member tensor name: (fused tensor name, its member names in order)} for the fusable projections."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for index in range(int(gguf.metadata.get(f"{gguf.metadata.get('general.architecture')}.block_count", 0))):
        for fused, parts in FUSED_PROJECTIONS.items():
            names = [f"blk.{index}.{part}.weight" for part in parts]
            infos = [gguf.tensors.get(name) for name in names]
            if any(info is None for info in infos):
                continue
            kinds = {(info.ggml_type, info.shape[1:]) for info in infos if info is not None}
            biases = {name.replace(".weight", ".bias") in gguf.tensors for name in names}
            if len(kinds) == 1 and len(biases) == 1:  # one type and shape; biases on all members or none
                for name in names:
                    groups[name] = (f"blk.{index}.{fused}.weight", names)
    return groups


def load_weights(gguf: GGUFFile) -> dict[str, Weight]:
    """Every tensor of the file as a Weight, read once into device memory (quantized ones stay packed); the
    members of a fused projection (FUSED_PROJECTIONS) become one Weight under the fused name."""
    groups, weights = fused_groups(gguf), {}
    waiting: dict[str, dict[str, tuple[GGUFTensorInfo, np.ndarray]]] = {}
    for info, view in mapped_tensors(gguf):
        if info.name not in groups:
            weights[info.name] = _load_weight(info, _file_bytes(info, view))
            continue
        fused, names = groups[info.name]
        members = waiting.setdefault(fused, {})
        members[info.name] = (info, _file_bytes(info, view).copy())  # the file's mapping may close before the rest
        if len(members) == len(names):
            first = members[names[0]][0]
            raw = np.concatenate([members[name][1] for name in names])
            rows = sum(members[name][0].shape[0] for name in names)
            weights[fused] = _load_weight(GGUFTensorInfo(fused, (rows, *first.shape[1:]), first.ggml_type, 0,
                                                         first.path), raw)  # fmt: skip
            del waiting[fused]
    return weights


def _file_bytes(info: GGUFTensorInfo, view: memoryview) -> np.ndarray:
    """The tensor's bytes in the file (a view of the mapping)."""
    return np.frombuffer(view, dtype=np.uint8, count=info.nbytes, offset=info.offset)


def _load_weight(info: GGUFTensorInfo, raw: np.ndarray) -> Weight:
    if info.type_name in FLOAT_TYPES or info.type_name == "BF16":
        return Weight(load_tensor(dataclasses.replace(info, offset=0), memoryview(raw)).realize(), info.ggml_type,
                      info.shape)  # fmt: skip
    _, block_elements, block_bytes = GGML_TYPES[info.ggml_type]
    raw = raw.reshape(*info.shape[:-1], info.shape[-1] // block_elements, block_bytes)
    return quantized_weight(raw, info.ggml_type, info.shape)


def load_model(path: str | Path, max_context: int = 4096) -> tuple[Transformer, GGUFFile]:
    """Read a GGUF file and build its Transformer (raises UnsupportedModelError for unknown architectures)."""
    gguf = gguf_read(path)
    vocab = len(gguf.metadata.get("tokenizer.ggml.tokens", []))
    config = TransformerConfig.from_metadata(gguf.metadata, vocab)
    for info in gguf.tensors.values():
        if info.type_name not in FLOAT_TYPES and info.type_name not in ("BF16", *DEQUANTIZERS):
            raise UnsupportedModelError(f"tensor {info.name!r} has GGML type {info.type_name}, which is not supported")
    embedding = EmbeddingTable(gguf.tensors["token_embd.weight"])
    return Transformer(config, load_weights(gguf), max_context, embedding), gguf


def parameter_count(gguf: GGUFFile) -> int:
    return sum(math.prod(info.shape) for info in gguf.tensors.values())
