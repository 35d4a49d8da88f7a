"""The scheduler: which nodes get buffers, how kernels read them, their order and the schedule cache."""

from __future__ import annotations

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.schedule.graph import ReduceArg, const_node, new_buffer, shape_of
from tg.codegen.schedule.realize import SPLIT_REDUCTION_MIN_ELEMENTS, find_realize_points
from tg.codegen.schedule.schedule import (
    CopyCall,
    KernelCall,
    create_schedule,
    graph_key,
    schedule_graph,
    schedule_stats,
)


def buffer(*shape: int, dtype=dtypes.float32, device: str = "CPU") -> UOp:
    size = 1
    for s in shape:
        size *= s
    return UOp(Ops.RESHAPE, dtype, (new_buffer(device, size, dtype),), shape)


def op(kind: Ops, *srcs: UOp) -> UOp:
    return UOp(kind, srcs[-1].dtype, srcs)


def movement(kind: Ops, node: UOp, arg: object) -> UOp:
    return UOp(kind, node.dtype, (node,), arg)


def reduce(node: UOp, kind: Ops, axes: tuple[int, ...]) -> UOp:
    return UOp(Ops.REDUCE_AXIS, node.dtype, (node,), ReduceArg(kind, axes))


def kernels(schedule) -> list[UOp]:
    return [item.ast for item in schedule.items if isinstance(item, KernelCall)]


def ops_in(ast: UOp) -> set[Ops]:
    return {u.op for u in ast.toposort()}


def test_elementwise_chain_fuses_into_one_kernel_with_one_store() -> None:
    a, b, c = buffer(4, 4), buffer(4, 4), buffer(4, 4)
    schedule = schedule_graph((op(Ops.ADD, a, op(Ops.MUL, b, c)),))
    (ast,) = kernels(schedule)
    assert [u.op for u in ast.src] == [Ops.STORE]
    assert sum(u.op is Ops.LOAD for u in ast.toposort()) == 3


def test_reduction_fuses_with_work_before_and_after() -> None:
    a, b = buffer(4, 8), buffer(4, 8)
    summed = reduce(op(Ops.ADD, a, b), Ops.ADD, (1,))
    scaled = op(
        Ops.MUL,
        summed,
        movement(Ops.EXPAND, movement(Ops.RESHAPE, const_node(2.0, dtypes.float32, "CPU"), (1, 1)), (4, 1)),
    )
    (ast,) = kernels(schedule_graph((scaled,)))
    assert Ops.REDUCE in ops_in(ast) and ast.arg.name == "r_4_8"


def test_broadcast_reduction_and_reduction_of_reduction_get_buffers() -> None:
    x = buffer(4, 8)
    largest = reduce(x, Ops.MAX, (0,))  # broadcast along the outer loop: fused, it would run once per element
    shifted = op(Ops.ADD, x, movement(Ops.EXPAND, largest, (4, 8)))
    assert largest in find_realize_points((shifted,))
    row_largest = reduce(x, Ops.MAX, (1,))  # a row reduction: fused, computed once per row (fuse_row_reduction)
    row_shifted = op(Ops.ADD, x, movement(Ops.EXPAND, row_largest, (4, 8)))
    assert find_realize_points((row_shifted,)) == [row_shifted]
    inner = reduce(x, Ops.ADD, (1,))
    outer = reduce(inner, Ops.ADD, (0,))
    assert inner in find_realize_points((outer,))
    assert find_realize_points((reduce(op(Ops.ADD, x, x), Ops.ADD, (0, 1)),)) == [
        reduce(op(Ops.ADD, x, x), Ops.ADD, (0, 1))
    ]


def test_views_of_buffers_need_no_kernel() -> None:
    a = buffer(3, 4)
    view = movement(Ops.PERMUTE, a, (1, 0))
    schedule = schedule_graph((view,))
    assert schedule.items == () and schedule.results == (view,)


def test_contiguous_reshape_reads_with_plain_strides() -> None:
    """A reshape of a permuted tensor folds back to multiply-adds: no division or remainder is left."""
    a = buffer(4, 6)
    node = op(Ops.ADD, movement(Ops.RESHAPE, a, (2, 2, 6)), movement(Ops.RESHAPE, a, (2, 2, 6)))
    (ast,) = kernels(schedule_graph((node,)))
    assert not ops_in(ast) & {Ops.IDIV, Ops.MOD}


def test_big_full_reduction_splits_into_partial_and_final_kernels() -> None:
    x = buffer(SPLIT_REDUCTION_MIN_ELEMENTS)
    first, second = kernels(schedule_graph((reduce(x, Ops.ADD, (0,)),)))
    assert first.arg.name.startswith("r_64_") and second.arg.name == "r_1_64"


def test_assign_runs_after_readers_of_the_old_value() -> None:
    target = buffer(8)
    reader = op(Ops.MUL, target, target)
    assign = UOp(Ops.ASSIGN, dtypes.float32, (target, op(Ops.ADD, target, target)))
    schedule = schedule_graph((assign, reader))
    names = [next(u for u in item.ast.toposort() if u.op is Ops.STORE).src[1].op for item in schedule.items]
    assert names == [Ops.MUL, Ops.ADD]
    assert schedule.items[1].buffers[0] is target.src[0]


def test_copy_of_a_view_is_realized_first() -> None:
    a = buffer(2, 3)
    copy = UOp(Ops.COPY, dtypes.float32, (movement(Ops.PERMUTE, a, (1, 0)), UOp(Ops.DEVICE, arg="PYTHON")))
    items = schedule_graph((copy,)).items
    assert isinstance(items[0], KernelCall) and isinstance(items[1], CopyCall)
    assert items[1].dest.src[0].arg == "PYTHON" and shape_of(copy) == (3, 2)


def test_schedule_cache_abstracts_buffer_identity_but_not_shape_or_constants() -> None:
    def graph(n: int, constant: float) -> UOp:
        a = buffer(n)
        scale = movement(Ops.EXPAND, movement(Ops.RESHAPE, const_node(constant, dtypes.float32, "CPU"), (1,)), (n,))
        return op(Ops.MUL, a, scale)

    create_schedule((graph(5, 3.0),))
    hits, misses = schedule_stats.hits, schedule_stats.misses
    first = create_schedule((graph(5, 3.0),))
    assert (schedule_stats.hits, schedule_stats.misses) == (hits + 1, misses)
    second = create_schedule((graph(5, 3.0),))
    assert first.items[0].ast is second.items[0].ast
    assert first.items[0].buffers[0] is not second.items[0].buffers[0]  # fresh output buffers every time
    create_schedule((graph(6, 3.0),))
    create_schedule((graph(5, 4.0),))
    assert schedule_stats.misses == misses + 2


def test_a_schedule_cache_hit_walks_the_graph_twice(monkeypatch) -> None:
    """A repeated `t.sum()` pays for every walk of its graph at each realize: a hit walks the roots once (to find
    the inputs and build the cache key from that same order) and the template's results once (to bind them)."""
    a = buffer(4, 8)

    def graph() -> UOp:
        return movement(Ops.RESHAPE, reduce(op(Ops.ADD, a, a), Ops.ADD, (0, 1)), ())

    create_schedule((graph(),))
    walks: list[UOp] = []
    real_toposort = UOp.toposort
    monkeypatch.setattr(UOp, "toposort", lambda node, gate=None: walks.append(node) or real_toposort(node, gate))
    hits = schedule_stats.hits
    schedule = create_schedule((graph(),))
    assert schedule_stats.hits == hits + 1 and len(schedule.items) == 1
    assert len(walks) == 2
    result = schedule.results[0]
    assert result.op is Ops.RESHAPE and result.src[0] is schedule.items[0].buffers[0]


def test_graph_key_abstracts_buffers_but_tells_apart_sharing_sizes_and_constants() -> None:
    """The schedule cache key: equal for one computation on other buffers, different when two reads of one buffer
    become reads of two, when a size differs, or for constants 1, 1.0 and True (equal in Python)."""

    def key(node: UOp) -> tuple:
        return graph_key(UOp.sink(node).toposort())

    def scaled(src: UOp, constant: object, dtype=dtypes.float32) -> UOp:
        c = movement(Ops.EXPAND, movement(Ops.RESHAPE, const_node(constant, dtype, "CPU"), (1,)), (4,))
        return UOp(Ops.MUL, dtype, (src, c))

    a, b = new_buffer("CPU", 4, dtypes.float32), new_buffer("CPU", 4, dtypes.float32)
    c, d = new_buffer("CPU", 4, dtypes.float32), new_buffer("CPU", 5, dtypes.float32)
    assert key(op(Ops.ADD, a, b)) == key(op(Ops.ADD, c, a))
    assert key(op(Ops.ADD, a, a)) != key(op(Ops.ADD, a, b))
    assert key(op(Ops.ADD, a, b)) != key(op(Ops.ADD, a, d))
    assert len({key(scaled(a, 1.0)), key(scaled(a, 2.0)), key(scaled(a, -0.0)), key(scaled(a, 0.0))}) == 4
    ints = new_buffer("CPU", 4, dtypes.int32)
    assert key(scaled(ints, 1, dtypes.int32)) != key(scaled(ints, True, dtypes.int32))


def test_contiguous_output_axes_merge_into_one_loop_and_transposed_ones_do_not() -> None:
    a, b = buffer(16, 3), buffer(16, 3)
    (merged,) = kernels(schedule_graph((op(Ops.ADD, a, b),)))
    assert merged.arg.name == "E_48"
    (separate,) = kernels(schedule_graph((op(Ops.ADD, movement(Ops.PERMUTE, buffer(3, 16), (1, 0)), b),)))
    assert separate.arg.name == "E_16_3"


def test_an_output_axis_read_as_r_div_c_and_r_mod_c_splits_into_two_loops() -> None:
    """A flat (48,) output read from a transposed (3, 16) view (the lane matvecs' (groups, 16) rows stored flat):
    one loop of 48 reads it at (r // 16) + (r % 16) * 3, which gcc vectorizes only with gathers; split at 16 the
    kernel has loops (3, 16) and no division or remainder of an index left."""
    transposed = movement(Ops.RESHAPE, movement(Ops.PERMUTE, buffer(16, 3), (1, 0)), (48,))
    (kernel,) = kernels(schedule_graph((op(Ops.ADD, transposed, buffer(48)),)))
    assert kernel.arg.name == "E_3_16"
    assert not [u for u in kernel.toposort() if u.op in (Ops.IDIV, Ops.MOD) and u.dtype is dtypes.index]


def test_a_reshape_indexes_each_group_of_axes_alone() -> None:
    """(h, t*16) read from (h, t, 16) with t symbolic: the merged axis splits into r // 16 and r % 16 alone, with no
    division by a symbolic size (through the flat position of all three axes the divisors were t*16 and t, which
    the simplifier cannot fold, and a decode step's weighted sum ran 2x slower). Oracle: the row-major flat position
    of the source index equals the one of the result index, for every value."""
    from tg.codegen import sym_infer
    from tg.codegen.schedule.indexing import flat_index, reshape_index

    t = UOp.variable("t", 1, 4)
    h, r = UOp.variable("h", 0, 2), UOp.variable("r", 0, 63)
    source = reshape_index((h, r), (3, t * 16), (3, t, 16))
    divisors = [u.src[1] for index in source for u in index.toposort() if u.op in (Ops.IDIV, Ops.MOD)]
    assert divisors and all(d.op is Ops.CONST for d in divisors)
    assert source[0].simplify() is h
    for tiles in range(1, 5):
        for head in range(3):
            for row in range(tiles * 16):
                values = {"t": tiles, "h": head, "r": row}
                new_flat = sym_infer(flat_index((h, r), (3, t * 16)), values)
                assert sym_infer(flat_index(source, (3, t, 16)), values) == new_flat


def test_the_kernel_stages_run_alone_one_after_another() -> None:
    """Issue 29 item 4: the schedule's kernel stages are objects that run alone on a KernelPlan, each filling in its
    part; an ASSIGN that reads what it overwrites stops the plan with a hazard (no order), and plan_kernels then runs
    them again with the value forced into its own buffer."""
    from tg.codegen.schedule.schedule import PLAN_STAGES, KernelPlan, plan_kernels

    target = buffer(8)
    shifted = movement(Ops.SHRINK, movement(Ops.PAD, target, ((1, 0),)), ((0, 8),))  # reads target[i - 1]
    assign = UOp(Ops.ASSIGN, dtypes.float32, (target, op(Ops.ADD, shifted, target)))
    plan = KernelPlan((assign,))
    find, build, hazards, order = PLAN_STAGES
    assert [stage.name for stage in PLAN_STAGES] == ["find realize points", "build kernels", "assign hazards", "order"]
    find.run(plan)
    assert assign in plan.points and plan.storage[assign] is target.src[0] and not plan.kernels
    build.run(plan)
    assert set(plan.kernels) == set(plan.points)
    hazards.run(plan)
    assert plan.hazard is assign
    order.run(plan)
    assert plan.order is None  # a hazard leaves nothing to order
    planned = plan_kernels((assign,))
    assert planned.hazard is None and planned.forced == (assign.src[1],) and len(planned.order) == 2
