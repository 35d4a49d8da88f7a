"""Lowering: kernel AST -> linear program (loops, accumulators, placement of values)."""

from __future__ import annotations

from tg.codegen import AxisType, KernelInfo, Ops, UOp, dtypes
from tg.codegen.lower import lower
from tg.codegen.pipeline import KERNEL_STAGES


def reduce_kernel() -> UOp:
    """out[i] = 2*i + sum_j in[i*8 + j]   (i < 4, j < 8)"""
    out = UOp.param(0, dtypes.float32, 4)
    inp = UOp.param(1, dtypes.float32, 32)
    i = UOp.range(4, 0)
    j = UOp.range(8, 1, AxisType.REDUCE)
    total = inp.index(i * 8 + j).load().reduce(j, arg=Ops.ADD)
    value = total + (i * 2).cast(dtypes.float32)
    return UOp.sink(out.index(i).store(value), arg=KernelInfo("r_4_8"))


def test_stages_are_listed_in_order_by_name() -> None:
    assert [stage.name for stage in KERNEL_STAGES] == [
        "simplify indices",
        "apply opts",
        "upcast strided reductions",
        "software transcendentals",
        "linearize",
        "prefetch next blocks",
        "split across cores",
    ]


def test_reduce_becomes_an_accumulator_loop_inside_the_output_loop() -> None:
    program = lower(reduce_kernel()).src
    kinds = [u.op for u in program]
    assert kinds.count(Ops.RANGE) == 2 and kinds.count(Ops.END) == 2
    outer, inner = [u for u in program if u.op is Ops.RANGE]
    assert program.index(outer) < program.index(inner)
    accumulator = next(u for u in program if u.op is Ops.PARAM and u.addrspace.name == "REG")
    stores = [u for u in program if u.op is Ops.STORE]
    assert len(stores) == 3  # initial value, update inside the loop, output
    assert stores[0].src[1].arg == 0.0 and program.index(stores[0]) < program.index(inner)
    assert stores[1].src[0].src[0] is accumulator


def test_values_that_do_not_change_in_a_reduce_loop_are_computed_before_it() -> None:
    program = lower(reduce_kernel()).src
    inner = next(u for u in program if u.op is Ops.RANGE and u.arg.axis_type is AxisType.REDUCE)
    row_start = next(u for u in program if u.op is Ops.MUL and u.dtype is dtypes.index and 8 in [s.arg for s in u.src])
    assert program.index(row_start) < program.index(inner)


def test_every_source_comes_before_its_use() -> None:
    program = lower(reduce_kernel()).src
    seen: set[UOp] = set()
    for node in program:
        for source in node.src:
            assert source in seen or source.op is Ops.CONST, f"{source.op} used before it is computed"
        seen.add(node)


def column_sum_kernel(rows: int, columns: int) -> UOp:
    """out[j] = sum_i in[i*columns + j]: a reduction that strides through memory."""
    out, inp = UOp.param(0, dtypes.float32, columns), UOp.param(1, dtypes.float32, rows * columns)
    j, i = UOp.range(columns, 0), UOp.range(rows, 1, AxisType.REDUCE)
    total = inp.index(i * columns + j).load().reduce(i, arg=Ops.ADD)
    return UOp.sink(out.index(j).store(total), arg=KernelInfo("r_cols"))


def test_strided_reduction_gets_lanes_of_accumulators_innermost() -> None:
    program = lower(column_sum_kernel(64, 512)).src
    accumulator = next(u for u in program if u.op is Ops.PARAM and u.addrspace.name == "REG")
    assert accumulator.dtype.size == 256
    order = [u.arg.axis_type for u in program if u.op is Ops.RANGE]
    assert order == [AxisType.LOOP, AxisType.UPCAST, AxisType.REDUCE, AxisType.UPCAST, AxisType.UPCAST]


def test_reduction_along_memory_gets_no_lanes() -> None:
    program = lower(reduce_kernel()).src
    assert all(u.arg.axis_type is not AxisType.UPCAST for u in program if u.op is Ops.RANGE)


def test_a_value_the_inner_output_loop_does_not_change_is_computed_before_it_opens() -> None:
    """out[i, j] = a[i, j] - log2(b[i]): the log2 once per row, not per element (log_softmax's last kernel; gcc
    left the software log2 in the inner loop and unswitched it on its selects, 8x slower)."""
    out, a, b = UOp.param(0, dtypes.float32, 32), UOp.param(1, dtypes.float32, 32), UOp.param(2, dtypes.float32, 4)
    i, j = UOp.range(4, 0), UOp.range(8, 1)
    value = a.index(i * 8 + j).load() - b.index(i).load().log2()
    program = lower(UOp.sink(out.index(i * 8 + j).store(value), arg=KernelInfo("E_4_8"))).src
    inner = next(u for u in program if u.op is Ops.RANGE and u.arg.axis_id == 1)
    log2 = next(u for u in program if u.op is Ops.LOG2)
    assert program.index(log2) < program.index(inner)
    assert sum(u.op is Ops.LOG2 for u in program) == 1


def scaled_rows_kernel(rows: int, columns: int) -> UOp:
    """out[i] = a[i] * sum_j b[j]: a reduction that no output loop changes (an RMSNorm's sum of squares inside a
    matvec, see tg.llm.lanes)."""
    out, a = UOp.param(0, dtypes.float32, rows), UOp.param(1, dtypes.float32, rows)
    b = UOp.param(2, dtypes.float32, columns)
    i, j = UOp.range(rows, 0), UOp.range(columns, 1, AxisType.REDUCE)
    total = b.index(j).load().reduce(j, arg=Ops.ADD)
    return UOp.sink(out.index(i).store(a.index(i).load() * total), arg=KernelInfo("r_rows"))


def test_a_reduction_the_output_loop_does_not_change_is_computed_once_before_it() -> None:
    program = lower(scaled_rows_kernel(64, 8)).src
    (rows,) = [u for u in program if u.op is Ops.RANGE and u.arg.axis_type is AxisType.LOOP]
    sum_loops = [u for u in program if u.op is Ops.RANGE and u.arg.axis_type in (AxisType.REDUCE, AxisType.UNROLL)]
    assert sum_loops
    for loop in sum_loops:
        end = next(u for u in program if u.op is Ops.END and u.src[0] is loop)
        assert program.index(end) < program.index(rows)
