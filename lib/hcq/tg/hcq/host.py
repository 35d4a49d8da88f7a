"""What the host CPU is, read once: the only place tg reads /sys or the CPU's feature flags.

The CPU device turns these facts into its `Target` (tg.codegen.target), which is what code generation sees:

    cpu_target(CRenderer, cores=2) -> Target(family="CPU", cores=2, max_lanes=..., l1_bytes=..., l2_bytes=..., ...)

A fact that cannot be read (no sysfs, another OS) falls back to the Target's default, so kernels are still
generated, for a machine of typical sizes.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

from tg.codegen.compiler.c import CCompiler
from tg.codegen.opt.heuristics import MAX_LANES, WIDE_MAX_LANES
from tg.codegen.render.base import Renderer
from tg.codegen.target import DEFAULT_L1_BYTES, DEFAULT_L2_BYTES, Target

CACHE_FOLDER = Path("/sys/devices/system/cpu/cpu0/cache")  # index0, index1, ...: one folder per cache of core 0
CPUINFO = Path("/proc/cpuinfo")
SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_cache_size(text: str) -> int | None:
    """Bytes of a sysfs cache size ("2048K", "32M", "512"), None when it is not one."""
    text = text.strip()
    if text[-1:] in SIZE_UNITS and text[:-1].isdigit():
        return int(text[:-1]) * SIZE_UNITS[text[-1]]
    return int(text) if text.isdigit() else None


@functools.cache
def data_cache_bytes(level: int, folder: Path = CACHE_FOLDER) -> int | None:
    """The size of core 0's level-`level` data (or unified) cache, as Linux sysfs gives it; None where unknown."""
    try:
        indexes = sorted(folder.glob("index*"))
        for index in indexes:
            kind = (index / "type").read_text().strip()
            if int((index / "level").read_text()) == level and kind in ("Data", "Unified"):
                return parse_cache_size((index / "size").read_text())
    except (OSError, ValueError):
        return None
    return None


@functools.cache
def cpuinfo_field(name: str) -> str:
    """The first value of field `name` in /proc/cpuinfo ("flags", "model name"), "" where there is none."""
    try:
        with CPUINFO.open() as f:
            for line in f:
                if line.split(":", 1)[0].strip() == name:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def wide_vectors() -> bool:
    """Whether this CPU is x86 with AVX-512 (32 registers of 16 floats), which C kernels are then compiled to use."""
    return platform.machine() in ("x86_64", "AMD64") and "avx512f" in cpuinfo_field("flags").split()


def vnni_dot_products() -> bool:
    """Whether this CPU has AVX-512 VNNI (`vpdpbusd` on 512-bit vectors), which C kernels compiled with
    -march=native may then use."""
    return wide_vectors() and "avx512_vnni" in cpuinfo_field("flags").split()


def cpu_model() -> str:
    return cpuinfo_field("model name") or platform.processor()


def host_c_compiler(cc: str | None = None) -> CCompiler:
    """The C compiler for kernels that run on this CPU: 512-bit vectors where it has AVX-512, its model in the key."""
    return CCompiler(cc, wide_vectors=wide_vectors(), cpu_model=cpu_model())


def cache_sizes() -> dict[str, int]:
    """The Target fields of this host's data caches (for any device whose kernels run on the host's CPU)."""
    return {
        "l1_bytes": data_cache_bytes(1) or DEFAULT_L1_BYTES,
        "l2_bytes": data_cache_bytes(2) or DEFAULT_L2_BYTES,
    }


def cpu_target(renderer_class: type[Renderer], cores: int, compiler: CCompiler | None = None) -> Target:
    """The Target of this host's CPU for kernels rendered by `renderer_class` on `cores` worker threads and, for the
    C renderer, compiled by `compiler`. The C renderer's kernels use AVX-512's 32 vector registers where the CPU has
    them (tg.codegen.compiler.c compiles them with -mprefer-vector-width=512), so the heuristics get twice the
    register lanes there; a compiler that converts float16 one element at a time gives scalar_half_conversion, and
    a CPU with AVX-512 VNNI gives the C renderer int8_dot."""
    from tg.codegen.render.c import CRenderer

    c_renderer = issubclass(renderer_class, CRenderer)
    wide = c_renderer and wide_vectors()
    return Target.of(
        renderer_class,
        family="CPU",
        cores=max(1, cores),
        max_lanes=WIDE_MAX_LANES if wide else MAX_LANES,
        scalar_half_conversion=c_renderer and compiler is not None and not compiler.vectorizes_half_conversion,
        int8_dot=c_renderer and vnni_dot_products(),
        **cache_sizes(),
    )
