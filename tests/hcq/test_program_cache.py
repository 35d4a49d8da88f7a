"""The engine's in-memory program cache: LRU-bounded by PROGRAM_CACHE_SIZE, so memory stays flat however many
distinct kernels a process makes. Kernels run on the PYTHON device, whose compiler is free."""

from __future__ import annotations

import gc
import weakref

import pytest

from tg.codegen import KernelInfo, UOp, dtypes
from tg.codegen.flags import FLAGS, Context, describe_flags
from tg.hcq.engine import clear_program_cache, get_program, program_cache_size, program_cache_stats


def offset_kernel(n: int) -> UOp:
    """out[i] = a[i] + n: a distinct kernel AST for every n."""
    out, a = UOp.param(0, dtypes.float32, 4), UOp.param(1, dtypes.float32, 4)
    i = UOp.range(4, 0)
    return UOp.sink(out.index(i).store(a.index(i).load() + float(n)), arg=KernelInfo(f"offset_{n}"))


def test_the_cache_keeps_the_most_recently_used_programs() -> None:
    clear_program_cache()
    first, second, third = (offset_kernel(n) for n in range(3))
    with Context(PROGRAM_CACHE_SIZE=2):
        get_program("PYTHON", first)
        get_program("PYTHON", second)
        get_program("PYTHON", first)  # now `second` is the least recently used
        get_program("PYTHON", third)
        assert program_cache_size() == 2
        assert (program_cache_stats.hits, program_cache_stats.misses, program_cache_stats.evictions) == (1, 3, 1)
        get_program("PYTHON", first)
        assert program_cache_stats.hits == 2
        get_program("PYTHON", second)  # evicted: compiled again
        assert program_cache_stats.misses == 4


def test_an_evicted_kernel_ast_is_freed() -> None:
    clear_program_cache()
    with Context(PROGRAM_CACHE_SIZE=1):
        ast = offset_kernel(10_001)
        alive = weakref.ref(ast)
        get_program("PYTHON", ast)
        del ast
        gc.collect()
        assert alive() is not None  # the cache holds it
        get_program("PYTHON", offset_kernel(10_002))
        gc.collect()
        assert alive() is None


def test_a_cache_of_size_zero_keeps_nothing() -> None:
    clear_program_cache()
    with Context(PROGRAM_CACHE_SIZE=0):
        program = get_program("PYTHON", offset_kernel(3))
        assert program.name == "offset_3" and program_cache_size() == 0


def test_the_flag_is_listed_with_the_others() -> None:
    assert "PROGRAM_CACHE_SIZE" in FLAGS and "PROGRAM_CACHE_SIZE" in describe_flags()
    assert FLAGS["PROGRAM_CACHE_SIZE"].default == 1024  # the default README.md states


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.slow
def test_memory_stays_flat_over_ten_thousand_distinct_kernels() -> None:
    clear_program_cache()
    with Context(PROGRAM_CACHE_SIZE=256):
        for n in range(1_000):  # fill the cache and every lazily built table first
            get_program("PYTHON", offset_kernel(n))
        gc.collect()
        objects_before, rss_before = len(gc.get_objects()), _rss_bytes()
        for n in range(1_000, 10_000):
            get_program("PYTHON", offset_kernel(n))
        gc.collect()
        objects_after, rss_after = len(gc.get_objects()), _rss_bytes()
    assert program_cache_size() == 256
    assert objects_after - objects_before < 1_000  # an unbounded cache adds dozens of objects per kernel
    assert rss_after - rss_before < 16 * 2**20
    clear_program_cache()
