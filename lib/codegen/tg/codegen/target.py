"""What code generation for one device may assume about its machine: the `Target`.

A device in tg.hcq builds one Target when it opens (tg.hcq is the only package that reads /sys or CPU flags) and
hands it to its renderer; codegen stages read it from there, as an argument, never from the machine. The Tensor
front end never sees it, so a program gives the same tensor graph on every machine and only the stages that read
the Target (operand packing, chunking by cache size, splitting a kernel across cores) make machine-specific kernels.

    target = Target.of(CRenderer, family="CPU", cores=2, l2_bytes=2 << 20)   # what tg.hcq's CPU device does
    renderer = CRenderer(target)

A renderer declares what its language can do as class fields (`has_local`, `shared_max`, `core_groups`,
`software_transcendentals`, `has_prefetch`, see tg.codegen.render.base.Renderer); `Target.of` copies them, the device
adds what it measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tg.codegen.opt.heuristics import MAX_LANES

DEFAULT_L1_BYTES = 32 << 10
DEFAULT_L2_BYTES = 1 << 20  # what the layout stages assume where a device measured nothing


class Capabilities(Protocol):
    """What a renderer class declares about its language (tg.codegen.render.base.Renderer has these fields)."""

    has_local: bool
    core_groups: bool
    software_transcendentals: bool
    has_prefetch: bool
    shared_max: int
    local_threads: int


@dataclass(frozen=True)
class Target:
    """Everything about a device that may change the kernels generated for it. Part of every program cache key
    (through the renderer that holds it), so two machines with equal Targets generate the same kernels."""

    family: str = ""  # the device family the kernels run on: "CPU", "PYTHON", "CUDA", ... ("" for none in particular)
    cores: int = 1  # calls of one kernel that run at once (the CPU device's worker threads)
    max_lanes: int = MAX_LANES  # accumulators the heuristics may keep in vector registers (256 with AVX-512)
    l1_bytes: int = DEFAULT_L1_BYTES  # per-core data caches
    l2_bytes: int = DEFAULT_L2_BYTES
    has_local: bool = False  # work-groups: LOCAL and GROUP opts are legal
    shared_max: int = 0  # bytes of memory a work-group shares (0: none)
    local_threads: int = 0  # threads per work-group the heuristics give a kernel (a LOCAL opt; 0: none)
    core_groups: bool = False  # a GROUP opt splits a reduction across core calls (the C renderer's GROUP_REDUCE)
    software_transcendentals: bool = False  # float32 exp2/log2 become float ops (tg.codegen.lower.transcendental)
    # the language can ask for memory ahead of its use (PREFETCH; the C renderer's __builtin_prefetch): a matmul reading
    # a weight too big for L2 fetches its next column strip while it works on this one (tg.codegen.lower.prefetch)
    prefetch: bool = False
    # the C compiler converts `_Float16` to float one element at a time (gcc 12, CCompiler.vectorizes_half_conversion):
    # the C renderer then widens a float16 read from memory to float32 from its bits with integer ops, which vectorize
    scalar_half_conversion: bool = False
    # the C compiler emits AVX-512 VNNI int8 dot products (`vpdpbusd`, the _mm512_dpbusd_epi32 intrinsic): kernels
    # written for it (tg-llm's int8 matvec) may run
    int8_dot: bool = False

    def __post_init__(self) -> None:
        if self.cores < 1:
            raise ValueError(f"a Target needs at least one core, got cores={self.cores}")

    @staticmethod
    def of(renderer_class: type[Capabilities] | Capabilities, **machine: Any) -> Target:
        """The Target of a machine (`machine`: family, cores, max_lanes, cache sizes, ...) rendered for by
        `renderer_class`, whose declared capabilities fill in has_local, shared_max, local_threads, core_groups,
        software_transcendentals and prefetch."""
        declared = {
            "has_local": renderer_class.has_local,
            "shared_max": renderer_class.shared_max,
            "local_threads": renderer_class.local_threads,
            "core_groups": renderer_class.core_groups,
            "software_transcendentals": renderer_class.software_transcendentals,
            "prefetch": renderer_class.has_prefetch,
        }
        return Target(**{**declared, **machine})


__all__ = ["DEFAULT_L1_BYTES", "DEFAULT_L2_BYTES", "Target"]
