"""Build one kernel AST from the tensor graph: the value of a node at every index of its output.

A kernel AST is a SINK (arg: KernelInfo) of one STORE into a PARAM at an index made of RANGEs. The stored value
is the node's computation with every realized input read through a LOAD, movement ops turned into index
arithmetic (see indexing.py), REDUCE_AXIS turned into a REDUCE over fresh REDUCE ranges, PAD into a gated
load plus a WHERE that yields 0 outside the source, and GATHER into a load at an index computed from loaded values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tg.codegen.dtype import dtypes
from tg.codegen.schedule import indexing
from tg.codegen.schedule.graph import Shape, shape_of, symbolic_numel
from tg.codegen.schedule.indexing import Index, index_const
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite
from tg.codegen.uop.reductions import reduce_identity

Request = tuple[UOp, Index, "UOp | None"]  # (tensor node, index into it, gate of its loads)


@dataclass(frozen=True)
class Plan:
    """How to compute one request: the requests it needs first, and how to combine their values."""

    needs: tuple[Request, ...]
    finish: Callable[[list[UOp]], UOp]


def _symbolic_value(node: UOp) -> UOp:
    value: UOp = node.arg
    return value if node.dtype is value.dtype else UOp(Ops.CAST, node.dtype, (value,))


class AssignError(ValueError):
    """An ASSIGN whose target cannot be written element by element (an expanded or padded view)."""


@dataclass
class KernelBuilder:
    """Builds the AST of one kernel. `storage` maps every realized tensor node to the BUFFER that holds it in
    C-contiguous order; the builder reads those instead of recomputing them."""

    storage: dict[UOp, UOp]
    buffers: list[UOp] = field(default_factory=list)  # BUFFER nodes in PARAM slot order
    params: dict[UOp, UOp] = field(default_factory=dict)  # BUFFER -> PARAM
    next_axis: int = 0
    memo: dict[Request, UOp] = field(default_factory=dict)
    plans: dict[Request, Plan] = field(default_factory=dict)

    # -------------------------------------------------------------------------------- building blocks

    def param(self, buffer: UOp) -> UOp:
        found = self.params.get(buffer)
        if found is None:
            slot = len(self.buffers)
            found = UOp.param(slot, buffer.dtype, buffer.arg.size, name=f"data{slot}")
            self.params[buffer] = found
            self.buffers.append(buffer)
        return found

    def new_range(self, size: int | UOp, axis_type: AxisType) -> UOp:
        rng = UOp.range(size, self.next_axis, axis_type)
        self.next_axis += 1
        return rng

    def ranges_for(self, shape: Shape, axis_type: AxisType) -> Index:
        """One range per axis of more than one element; a size-1 axis is the constant 0."""
        return tuple(self.new_range(s, axis_type) if s != 1 else index_const(0) for s in shape)

    def load(self, buffer: UOp, position: UOp, valid: UOp | None) -> UOp:
        address = self.param(buffer).index(position) if valid is None else self.param(buffer).index(position, valid)
        if valid is None:
            return address.load()
        return address.load(UOp.const(0, buffer.dtype))

    # -------------------------------------------------------------------------------- values

    def value(self, node: UOp, idx: Index, valid: UOp | None = None) -> UOp:
        """The kernel expression for element `idx` of tensor node `node` (loads gated by `valid`).

        Evaluated with an explicit stack rather than recursion, so graphs thousands of ops deep work: each
        request (node, idx, valid) is first planned (which requests it needs, how to combine their values),
        then finished once those are done."""
        root: Request = (node, idx, valid)
        stack: list[tuple[Request, bool]] = [(root, False)]
        while stack:
            request, sources_done = stack.pop()
            if request in self.memo:
                continue
            plan = self.plans.get(request)
            if plan is None:
                plan = self.plans[request] = self._plan(*request)
            if sources_done or not plan.needs:
                self.memo[request] = plan.finish([self.memo[n] for n in plan.needs])
                continue
            stack.append((request, True))
            stack.extend((n, False) for n in plan.needs if n not in self.memo)
        return self.memo[root]

    def _plan(self, node: UOp, idx: Index, valid: UOp | None) -> Plan:
        op = node.op
        if op is Ops.ASSIGN:  # its value is its target (a view of the buffer it wrote), read after it ran
            return Plan(((node.src[0], idx, valid),), lambda values: values[0])
        stored = self.storage.get(node)
        if stored is not None:
            load = self.load(stored, indexing.flat_index(idx, shape_of(node)), valid)
            return Plan((), lambda _: load)
        if op is Ops.BUFFER:
            load = self.load(node, idx[0], valid)
            return Plan((), lambda _: load)
        if op is Ops.CONST:  # a symbolic value is computed from the kernel's variables, in the node's dtype
            const = _symbolic_value(node) if isinstance(node.arg, UOp) else UOp.const(node.arg, node.dtype)
            return Plan((), lambda _: const)
        if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
            return Plan(tuple((s, idx, valid) for s in node.src), lambda values: UOp(op, node.dtype, tuple(values)))
        if op is Ops.DETACH:
            return Plan(((node.src[0], idx, valid),), lambda values: values[0])
        if op is Ops.REDUCE_AXIS:
            return self._plan_reduce(node, idx, valid)
        if op in GroupOp.Movement:
            return self._plan_movement(node, idx, valid)
        if op is Ops.GATHER:
            return self._plan_gather(node, idx, valid)
        raise ValueError(f"{op!r} must be realized before a kernel can read it (the scheduler missed it)")

    def _plan_movement(self, node: UOp, idx: Index, valid: UOp | None) -> Plan:
        source = node.src[0]
        old_shape = shape_of(source)
        op, arg = node.op, node.arg
        if op is Ops.PAD:  # read the source only where the index is inside it, 0 elsewhere
            source_idx, inside = indexing.pad_index(idx, arg, old_shape)
            if inside is None:
                return Plan(((source, source_idx, valid),), lambda values: values[0])
            inside = inside.simplify()
            gate = inside if valid is None else valid & inside
            zero = UOp.const(0, node.dtype)
            return Plan(((source, source_idx, gate),), lambda values: inside.where(values[0], zero))
        if op is Ops.RESHAPE:
            source_idx = indexing.reshape_index(idx, shape_of(node), old_shape)
        elif op is Ops.PERMUTE:
            source_idx = indexing.permute_index(idx, arg)
        elif op is Ops.EXPAND:
            source_idx = indexing.expand_index(idx, old_shape)
        elif op is Ops.SHRINK:
            source_idx = indexing.shrink_index(idx, arg)
        else:
            source_idx = indexing.flip_index(idx, arg, old_shape)
        return Plan(((source, source_idx, valid),), lambda values: values[0])

    def _plan_gather(self, node: UOp, idx: Index, valid: UOp | None) -> Plan:
        """Read the source where the index tensors point: their values (computed first, at this element) become the
        source's index on the gathered axes. A position outside its axis reads 0, its load gated off (like PAD)."""
        source = node.src[0]
        source_shape = shape_of(source)
        source_idx = list(indexing.expand_index(idx, source_shape))  # (a size-1 axis of the source is broadcast)
        inside: UOp | None = None
        for axis, index in zip(node.arg, node.src[1:], strict=True):
            position = self.value(index, idx, valid).cast(dtypes.index)
            in_axis = (position >= 0) & (position < source_shape[axis])
            inside = in_axis if inside is None else inside & in_axis
            source_idx[axis] = position
        assert inside is not None  # (the spec requires at least one index)
        gate = inside if valid is None else valid & inside
        zero = UOp.const(0, node.dtype)
        return Plan(((source, tuple(source_idx), gate),), lambda values: inside.where(values[0], zero))

    def _plan_reduce(self, node: UOp, idx: Index, valid: UOp | None) -> Plan:
        source = node.src[0]
        op, axes = node.arg.op, node.arg.axes
        source_shape = shape_of(source)
        if any(source_shape[axis] == 0 for axis in axes):
            identity = UOp.const(reduce_identity(op, node.dtype), node.dtype)
            return Plan((), lambda _: identity)
        source_idx = list(idx)
        ranges = []
        for axis in axes:
            if source_shape[axis] == 1:
                continue
            rng = self.new_range(source_shape[axis], AxisType.REDUCE)
            source_idx[axis] = rng
            ranges.append(rng)
        return Plan(((source, tuple(source_idx), valid),), lambda values: values[0].reduce(*ranges, arg=op))

    # -------------------------------------------------------------------------------- stores

    def store_address(self, target: UOp, idx: Index) -> UOp:
        """The INDEX an ASSIGN writes element `idx` of `target` to (target: movement ops over a buffer)."""
        view = target
        while view.op in GroupOp.Movement:
            if view.op is Ops.EXPAND and shape_of(view) != shape_of(view.src[0]):
                raise AssignError(f"cannot assign to an expanded view {shape_of(view.src[0])} -> {shape_of(view)}")
            view = view.src[0]
        loaded = self.value(target, idx)
        if loaded.op is not Ops.LOAD or loaded.src[0].op is not Ops.INDEX or len(loaded.src[0].src) != 2:
            raise AssignError(f"cannot assign to a view that is padded or computed (target shape {shape_of(target)})")
        return loaded.src[0]


def kernel_name(output_ranges: Index, reduce_ranges: list[UOp]) -> str:
    """`E_4_4` for elementwise kernels, `r_<output sizes>_<reduce sizes>` for kernels with a reduction; a symbolic
    size is named by its expression's variables and numbers (`E_n_4` for a loop of n*4)."""
    sizes = [_size_name(r.src[0]) for r in output_ranges if r.op is Ops.RANGE] or ["1"]
    if not reduce_ranges:
        return "E_" + "_".join(sizes)
    return "r_" + "_".join(sizes + [_size_name(r.src[0]) for r in reduce_ranges])


def _size_name(end: UOp) -> str:
    if end.op is Ops.CONST:
        return str(end.arg)
    return "_".join("".join(c if c.isalnum() else " " for c in end.render()).split())


@dataclass(frozen=True)
class Kernel:
    """A kernel AST and the BUFFER nodes its PARAMs stand for (slot order; slot 0 is written)."""

    ast: UOp
    buffers: tuple[UOp, ...]


def build_kernel(point: UOp, output: UOp, storage: dict[UOp, UOp]) -> Kernel:
    """The kernel that computes realize point `point` into BUFFER `output` (for ASSIGN: into its target).

    It first tries one loop over all output elements: when every index then simplifies to plain strides (no
    division or remainder left), the output axes merge into one long loop that vectorizes and splits across
    cores evenly. Otherwise each output axis gets its own loop, and an axis whose loop every index still divides
    by the same constant is split at it (`_split_axes`)."""
    shape = shape_of(point)
    if sum(1 for size in shape if size != 1) > 1:
        flat = _build(point, output, storage, (symbolic_numel(shape),))
        if not _index_divisions(flat):
            return flat
    kernel = _build(point, output, storage, shape)
    split = _split_axes(kernel, shape)
    if split != shape:
        kernel = _build(point, output, storage, split)
    return kernel


def _index_divisions(kernel: Kernel) -> list[UOp]:
    return [u for u in kernel.ast.toposort() if u.op in (Ops.IDIV, Ops.MOD) and u.dtype is dtypes.index]


def _split_axes(kernel: Kernel, shape: Shape) -> Shape:
    """`shape` with each output axis that indices divide by one constant c (`r // c`, `r % c`) split into
    `(size / c, c)`. Why: an output reshaped from `(groups, 16)` to `(groups * 16,)` (the lane matvecs' rows) is
    stored flat, while its inputs are read as `base + (r // 16) * stride + r % 16`; in one loop of r that is no
    contiguous vector load (gcc gathers, 8 lanes at a time), in two loops the inner one reads 16 consecutive words."""
    axes = [axis for axis, size in enumerate(shape) if size != 1]
    ranges = sorted((u for u in kernel.ast.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.LOOP),
                    key=lambda r: r.arg.axis_id)  # fmt: skip
    if len(ranges) != len(axes):
        return shape
    divisors: dict[int, set[int]] = {}
    for u in _index_divisions(kernel):
        if u.src[0] in ranges and u.src[1].op is Ops.CONST:
            divisors.setdefault(axes[ranges.index(u.src[0])], set()).add(u.src[1].arg)
    split: list[int | UOp] = []
    for axis, size in enumerate(shape):
        found = divisors.get(axis, set())
        if len(found) == 1 and isinstance(size, int) and 1 < (c := next(iter(found))) < size and size % c == 0:
            split += [size // c, c]
        else:
            split.append(size)
    return tuple(split)


def _build(point: UOp, output: UOp, storage: dict[UOp, UOp], loop_shape: Shape) -> Kernel:
    builder = KernelBuilder({node: buf for node, buf in storage.items() if node is not point})
    shape = shape_of(point)
    output_param = builder.param(output)
    loops = builder.ranges_for(loop_shape, AxisType.LOOP)
    idx = loops if loop_shape == shape else indexing.reshape_index(loops, loop_shape, shape)
    if point.op is Ops.ASSIGN:
        target, computed = point.src
        address = builder.store_address(target, idx)
    else:
        computed = point.src[0] if point.op is Ops.CONTIGUOUS else point
        address = output_param.index(indexing.flat_index(idx, shape))
    value = builder.value(computed, idx)
    if value.dtype is not output.dtype:
        raise TypeError(f"kernel stores {value.dtype!r} into a {output.dtype!r} buffer")
    devices = sorted({b.src[0].arg for b in builder.buffers})
    if len(devices) > 1:
        raise ValueError(f"one kernel cannot read buffers on {' and '.join(devices)}: COPY them to one device first")
    store = address.store(value)
    reduce_ranges = [u for u in store.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.REDUCE]
    reduce_ranges.sort(key=lambda r: r.arg.axis_id)
    info = KernelInfo(name=kernel_name(loops, reduce_ranges))
    ast = graph_rewrite(UOp.sink(store, arg=info), simplify_indices, name="simplify indices")
    return _drop_unread_buffers(ast, builder)


def _drop_unread_buffers(ast: UOp, builder: KernelBuilder) -> Kernel:
    """Simplification can remove every read of a buffer (a pad that only shows padding): renumber the PARAMs
    that are left, so slots stay 0..n-1 and match the buffers the kernel is called with."""
    used = {u for u in ast.toposort() if u.op is Ops.PARAM}
    kept = [b for b in builder.buffers if builder.params[b] in used]
    if len(kept) == len(builder.buffers):
        return Kernel(ast, tuple(builder.buffers))
    renumbered = {}
    for slot, buffer in enumerate(kept):
        old = builder.params[buffer]
        renumbered[old] = old.replace(arg=replace(old.arg, slot=slot, name=f"data{slot}"))
    return Kernel(ast.substitute(renumbered), tuple(kept))
