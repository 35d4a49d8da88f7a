"""The prefetch stage (tg.codegen.lower.prefetch): while a reduction works on one block of a streamed buffer (a
matmul's weight strip), it asks for every line of the next block, and for nothing else."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from tg.codegen.dtype import dtypes, from_numpy
from tg.codegen.lower.linearize import linearize
from tg.codegen.lower.prefetch import LINE_BYTES, prefetch_next_blocks
from tg.codegen.pipeline import CodegenFlags, kernel_to_program
from tg.codegen.render.c import CRenderer
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite
from tg.hcq import Buffer, Device

BLOCKS, TILES, STEPS = 3, 4, 256  # a block of 256 floats: 16 lines, requested over the first tiles' reductions


def strip_kernel(
    blocks: int = BLOCKS,
    tiles: int = TILES,
    steps: int = STEPS,
    b_moves_with_tile: bool = False,
    tiles_outside: bool = False,
) -> UOp:
    """out[o * tiles + i] = sum_r a[i * steps + r] * b[o * steps + r]: block o of b is read again by every tile i
    (with `b_moves_with_tile`, b's position also moves with i, so no tile rereads another's block). The block loop o
    is outside the tile loop i, or inside it with `tiles_outside`."""
    out = UOp.param(0, dtypes.float32, blocks * tiles)
    a = UOp.param(1, dtypes.float32, tiles * steps)
    b = UOp.param(2, dtypes.float32, blocks * tiles * steps if b_moves_with_tile else blocks * steps)
    o, i = (UOp.range(blocks, 1), UOp.range(tiles, 0)) if tiles_outside else (UOp.range(blocks, 0), UOp.range(tiles, 1))
    r = UOp.range(steps, 2, AxisType.REDUCE)
    b_position = (o * tiles + i) * steps + r if b_moves_with_tile else o * steps + r
    total = (a.index(i * steps + r).load() * b.index(b_position).load()).reduce(r, arg=Ops.ADD)
    return UOp.sink(out.index(o * tiles + i).store(total), arg=KernelInfo("strips"))


def prefetches(linear: UOp, slot: int = 2) -> list[UOp]:
    """The PREFETCHes of buffer `slot` (b's, by default)."""
    return [u for u in linear.src if u.op is Ops.PREFETCH and u.src[0].src[0].arg.slot == slot]


def value_of(expression: UOp, values: dict[UOp, int]) -> int | bool:
    folded = graph_rewrite(
        expression.substitute({r: UOp.const(v, r.dtype) for r, v in values.items()}), simplify_indices
    )
    assert folded.op is Ops.CONST, folded
    return folded.arg


def requested_positions(
    found: list[UOp], block_loop_id: int, block: int, fixed: dict[int, int] | None = None
) -> set[int]:
    """Every element position the PREFETCHes in `found` ask for while the loop with axis id `block_loop_id` is at
    `block` (and the loops in `fixed`, axis id -> value, at theirs), over all values of the other loops."""
    requested = set()
    for prefetch in found:
        _, position, gate = prefetch.src[0].src
        ranges = sorted(
            {u for x in (position, gate) for u in x.toposort() if u.op is Ops.RANGE}, key=lambda r: r.arg.axis_id
        )
        pinned = {block_loop_id: block, **(fixed or {})}
        others = [r for r in ranges if r.arg.axis_id not in pinned]
        for point in itertools.product(*(range(int(r.src[0].arg)) for r in others)):
            values = {r: pinned[r.arg.axis_id] for r in ranges if r.arg.axis_id in pinned}
            values.update(zip(others, point, strict=True))
            if value_of(gate, values):
                requested.add(value_of(position, values))
    return requested


LINE = LINE_BYTES // 4  # floats per line


def next_block_lines(block: int) -> set[int]:
    return {(block + 1) * STEPS + k * LINE for k in range(STEPS // LINE)}


def test_every_line_of_the_next_block_is_requested_once_per_block_and_nothing_else() -> None:
    found = prefetches(prefetch_next_blocks(linearize(strip_kernel()), l2_bytes=0))
    assert len(found) == 1  # one per step, spread over the tiles
    for block in range(BLOCKS - 1):
        assert requested_positions(found, 0, block) == next_block_lines(block)
    assert requested_positions(found, 0, BLOCKS - 1) == set()  # there is no block after the last


def test_with_the_block_loop_innermost_each_tile_requests_the_whole_next_block() -> None:
    found = prefetches(prefetch_next_blocks(linearize(strip_kernel(tiles_outside=True)), l2_bytes=0))
    assert found  # b's block o is reread by the next tile, after every other block: each block's reduction asks
    for tile in range(TILES):
        for block in range(BLOCKS - 1):
            assert requested_positions(found, 1, block, {0: tile}) == next_block_lines(block)
        assert requested_positions(found, 1, BLOCKS - 1, {0: tile}) == set()


def test_the_prefetch_is_placed_inside_the_reduction_loop() -> None:
    program = prefetch_next_blocks(linearize(strip_kernel()), l2_bytes=0).src
    (prefetch,) = prefetches(UOp(Ops.LINEAR, dtypes.void, program))
    reduction = next(u for u in program if u.op is Ops.RANGE and u.arg.axis_type is AxisType.REDUCE)
    closing = next(u for u in program if u.op is Ops.END and u.src[0] is reduction)
    assert program.index(reduction) < program.index(prefetch) < program.index(closing)


def test_a_buffer_that_fits_in_l2_is_not_prefetched() -> None:
    b_bytes = BLOCKS * STEPS * 4
    assert prefetches(prefetch_next_blocks(linearize(strip_kernel()), l2_bytes=b_bytes)) == []
    assert len(prefetches(prefetch_next_blocks(linearize(strip_kernel()), l2_bytes=b_bytes - 1))) == 1


def test_a_buffer_no_loop_rereads_is_not_prefetched() -> None:
    assert prefetches(prefetch_next_blocks(linearize(strip_kernel(b_moves_with_tile=True)), l2_bytes=0)) == []


def batched_strip_kernel(batches: int) -> UOp:
    """strip_kernel once per batch h, each over its own slice of a and b (an attention product's heads)."""
    out = UOp.param(0, dtypes.float32, batches * BLOCKS * TILES)
    a = UOp.param(1, dtypes.float32, batches * TILES * STEPS)
    b = UOp.param(2, dtypes.float32, batches * BLOCKS * STEPS)
    h, o, i = UOp.range(batches, 0), UOp.range(BLOCKS, 1), UOp.range(TILES, 2)
    r = UOp.range(STEPS, 3, AxisType.REDUCE)
    product = a.index((h * TILES + i) * STEPS + r).load() * b.index((h * BLOCKS + o) * STEPS + r).load()
    out_position = (h * BLOCKS + o) * TILES + i
    return UOp.sink(out.index(out_position).store(product.reduce(r, arg=Ops.ADD)), arg=KernelInfo("heads"))


def test_a_batch_whose_slice_fits_in_l2_is_not_prefetched_however_big_the_buffer() -> None:
    batches, slice_bytes = 8, BLOCKS * STEPS * 4  # b's slice for one batch: its blocks, which every tile rereads
    kernel = linearize(batched_strip_kernel(batches))
    assert prefetches(prefetch_next_blocks(kernel, l2_bytes=slice_bytes)) == []  # (the whole of b is 8x that)
    found = prefetches(prefetch_next_blocks(kernel, l2_bytes=slice_bytes - 1))
    assert len(found) == 1
    for batch in range(batches):
        for block in range(BLOCKS - 1):
            expected = {batch * BLOCKS * STEPS + line for line in next_block_lines(block)}
            assert requested_positions(found, 1, block, {0: batch}) == expected


def c_renderer_with_small_l2() -> CRenderer:
    """The CPU device's renderer with an L2 of 1 KiB: every streamed buffer bigger than that is prefetched."""
    return CRenderer(replace(Device["CPU"].renderer.target, l2_bytes=1024))


def packed_matmul_kernel(rows: int, strips: int, steps: int) -> UOp:
    """out[i, 16 s + l] = sum_k a[i, k] * packed[s, k, l]: a matmul over a right operand packed in column strips of 16
    (tg.codegen.schedule.layout), as the scheduler hands it to the heuristics."""
    out = UOp.param(0, dtypes.float32, rows * strips * 16)
    a = UOp.param(1, dtypes.float32, rows * steps)
    packed = UOp.param(2, dtypes.float32, strips * steps * 16)
    i, s, lane = UOp.range(rows, 0), UOp.range(strips, 1), UOp.range(16, 2)
    k = UOp.range(steps, 3, AxisType.REDUCE)
    product = a.index(i * steps + k).load() * packed.index(s * steps * 16 + k * 16 + lane).load()
    return UOp.sink(
        out.index(i * strips * 16 + s * 16 + lane).store(product.reduce(k, arg=Ops.ADD)), arg=KernelInfo("mm")
    )


def run_on_cpu(source, out_size: int, *inputs: np.ndarray) -> np.ndarray:  # noqa: ANN001 (a ProgramSource)
    device = Device["CPU"]
    program = device.runtime(source.name, device.compiler.compile(source.src))
    buffers = [Buffer("CPU", out_size, from_numpy(np.dtype(np.float32))).ensure_allocated()]
    for array in inputs:
        buffers.append(Buffer("CPU", array.size, from_numpy(array.dtype)).ensure_allocated())
        buffers[-1].copyin(np.ascontiguousarray(array).tobytes())
    program(*(buf.raw for buf in buffers), global_size=source.global_size, wait=True)
    return np.frombuffer(buffers[0].as_buffer(), np.float32).copy()


def test_an_optimized_matmul_with_prefetches_compiles_and_matches_numpy() -> None:
    rows, strips, steps = 128, 12, 96  # more strips than row tiles: the strips go outermost (strips_outermost)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, steps)).astype(np.float32)
    b = rng.standard_normal((steps, strips * 16)).astype(np.float32)
    packed = b.reshape(steps, strips, 16).transpose(1, 0, 2)
    source = kernel_to_program(packed_matmul_kernel(rows, strips, steps), c_renderer_with_small_l2(), CodegenFlags())
    assert "__builtin_prefetch(&data2[" in source.src and source.applied_opts  # the heuristics tiled it
    out = run_on_cpu(source, rows * strips * 16, a, packed).reshape(rows, strips * 16)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_renderers_without_prefetches_get_none() -> None:
    flags = CodegenFlags()
    python = Device["PYTHON"].renderer
    assert not python.target.prefetch
    source = kernel_to_program(strip_kernel(), python, flags)
    assert "prefetch" not in source.src
