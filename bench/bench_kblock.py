"""k-blocking benchmark: does BLOCK (cutting the reduction into blocks looped outside the output loops) pay on top of
the hand-coded matmul tile? The measurement behind the heuristics' "no BLOCK" rule (tg.codegen.opt.heuristics).

    CC=gcc uv run python bench/bench_kblock.py [--shapes 1024x1024x1024,...] [--blocks 128,256] [--repeats 5]

For each n x k x m the matmul kernel that `Tensor @` schedules (its right operand packed into column strips where
tg.tensor.linalg packs it) runs on the CPU device with: the heuristics' opts (`hand`), the same with BLOCK of each
size in front (`B<size>`), and without the heuristics' SWAP (`noswap`: rows outside column strips; B<size>-noswap
both). Every variant's output must have the same bits as `hand`'s (BLOCK keeps each element's order of additions).
Times are medians of --repeats calls timed in turns; the machine is shared, so the load average is printed before
and after. Columns: GFLOP/s and, in brackets, hand's time over the variant's (above 1: the variant is faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

DEFAULT_SHAPES = "512x512x512,1024x1024x1024,2048x2048x2048,128x768x2304,128x768x3072,128x3072x768,128x65536x256"
SETTLE_SECONDS = 0.05


def variants(hand: list, blocks: list[int], k: int) -> dict[str, list]:
    """The opt lists to time: the heuristics' own, with BLOCK in front, and without their SWAP (the two upcasts then
    name the other output axis, so their axes are exchanged too)."""
    from tg.codegen.opt import Opt, OptOps

    unswapped = [Opt(o.op, 1 - o.axis, o.arg) if o.op is OptOps.UPCAST else o for o in hand if o.op is not OptOps.SWAP]
    swapped = unswapped != hand
    found = {"hand": hand, **({"noswap": unswapped} if swapped else {})}
    for block in (b for b in blocks if k % b == 0 and b < k):
        found[f"B{block}"] = [Opt(OptOps.BLOCK, 0, block), *hand]
        if swapped:
            found[f"B{block}-noswap"] = [Opt(OptOps.BLOCK, 0, block), *unswapped]
    return found


def matmul_kernel(n: int, k: int, m: int):  # noqa: ANN201 (a UOp; tg is imported lazily, after argument parsing)
    """The last kernel of `Tensor.empty(n, k) @ Tensor.empty(k, m)`: the product (a packing copy may come first)."""
    from tg.codegen.schedule.schedule import KernelCall, create_schedule
    from tg.tensor import Tensor

    product = Tensor.empty(n, k) @ Tensor.empty(k, m)
    return [item.ast for item in create_schedule((product.uop,)).items if isinstance(item, KernelCall)][-1]


def runner(ast, opts: list, buffers: list) -> Callable[[], None]:  # noqa: ANN001
    from tg.codegen.pipeline import CodegenFlags, kernel_to_program, with_opts
    from tg.hcq import Device

    device = Device["CPU"]
    flags = CodegenFlags(max_lanes=device.target.max_lanes, core_groups=device.target.core_groups)
    source = kernel_to_program(with_opts(ast, tuple(opts)), device.renderer, flags)
    program = device.runtime(source.name, device.compiler.compile(source.src))
    return lambda: program(*(b.raw for b in buffers), global_size=source.global_size, wait=True)


def measure(n: int, k: int, m: int, blocks: list[int], repeats: int) -> str:
    from tg.codegen.dtype import from_numpy
    from tg.codegen.opt import KernelOptimizer, hand_coded_optimizations
    from tg.hcq import Buffer, Device

    ast = matmul_kernel(n, k, m)
    renderer = Device["CPU"].renderer
    hand = hand_coded_optimizations(
        KernelOptimizer(ast, core_groups=renderer.target.core_groups), renderer.target.max_lanes
    )
    rng = np.random.default_rng(0)
    buffers = []
    for _, size in sorted((u.arg.slot, u.dtype.size) for u in ast.toposort() if u.op.name == "PARAM"):
        buffer = Buffer("CPU", size, from_numpy(np.dtype(np.float32))).ensure_allocated()
        buffer.copyin(rng.standard_normal(size, np.float32).tobytes())
        buffers.append(buffer)
    nan = np.full(n * m, np.nan, np.float32).tobytes()
    runs, reference = {}, None
    for name, opts in variants(hand, blocks, k).items():
        runs[name] = runner(ast, opts, buffers)
        buffers[0].copyin(nan)  # an element the variant misses stays NaN
        runs[name]()  # warm-up, and the bits to compare
        out = np.frombuffer(buffers[0].as_buffer(), np.float32).copy()
        if reference is None:
            reference = out
            assert not np.isnan(out).any(), f"{n}x{k}x{m}: the heuristics' kernel left outputs unwritten"
        if not np.array_equal(out, reference):
            raise AssertionError(f"{n}x{k}x{m} {name}: other bits than the heuristics' kernel")
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            time.sleep(SETTLE_SECONDS)
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    cells = [f"{name} {2 * n * k * m / s / 1e9:.1f} ({medians['hand'] / s:.2f}x)" for name, s in medians.items()]
    return f"{n}x{k}x{m}  hand opts {hand}\n    " + "  ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated n x k x m")
    parser.add_argument("--blocks", default="128,256,4096", help="comma-separated BLOCK sizes (elements of k)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    from tg.codegen.compiler.c import find_c_compiler

    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"C compiler: {os.environ.get('CC') or find_c_compiler()}")
    for shape in args.shapes.split(","):
        n, k, m = (int(x) for x in shape.split("x"))
        print(measure(n, k, m, blocks, args.repeats), flush=True)
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
