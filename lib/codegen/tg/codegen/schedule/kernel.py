"""Build one kernel AST from the tensor graph: the value of a node at every index of its output.

A kernel AST is a SINK (arg: KernelInfo) of one STORE into a PARAM at an index made of RANGEs. The stored value
is the node's computation with every realized input read through a LOAD, movement ops turned into index
arithmetic (see indexing.py), REDUCE_AXIS turned into a REDUCE over fresh REDUCE ranges, and PAD into a gated
load plus a WHERE that yields 0 outside the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tg.codegen.dtype import dtypes
from tg.codegen.schedule import indexing
from tg.codegen.schedule.graph import shape_of
from tg.codegen.schedule.indexing import Index, index_const
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite


def reduce_identity(op: Ops, dtype) -> object:  # noqa: ANN001 - a DType
    """The value a reduction starts from (and what it gives over zero elements)."""
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    if op is Ops.MAX:
        return dtypes.min(dtype)
    raise ValueError(f"no reduction with {op!r}")


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
    memo: dict[tuple, UOp] = field(default_factory=dict)

    # -------------------------------------------------------------------------------- building blocks

    def param(self, buffer: UOp) -> UOp:
        found = self.params.get(buffer)
        if found is None:
            slot = len(self.buffers)
            found = UOp.param(slot, buffer.dtype, buffer.arg.size, name=f"data{slot}")
            self.params[buffer] = found
            self.buffers.append(buffer)
        return found

    def new_range(self, size: int, axis_type: AxisType) -> UOp:
        rng = UOp.range(size, self.next_axis, axis_type)
        self.next_axis += 1
        return rng

    def ranges_for(self, shape: tuple[int, ...], axis_type: AxisType) -> Index:
        """One range per axis of more than one element; a size-1 axis is the constant 0."""
        return tuple(self.new_range(s, axis_type) if s != 1 else index_const(0) for s in shape)

    def load(self, buffer: UOp, position: UOp, valid: UOp | None) -> UOp:
        address = self.param(buffer).index(position) if valid is None else self.param(buffer).index(position, valid)
        if valid is None:
            return address.load()
        return address.load(UOp.const(0, buffer.dtype))

    # -------------------------------------------------------------------------------- values

    def value(self, node: UOp, idx: Index, valid: UOp | None = None) -> UOp:
        """The kernel expression for element `idx` of tensor node `node` (loads gated by `valid`)."""
        key = (node, idx, valid)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._value(node, idx, valid)
        return found

    def _value(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
        op = node.op
        stored = self.storage.get(node)
        if stored is not None:
            return self.load(stored, indexing.flat_index(idx, shape_of(node)), valid)
        if op is Ops.BUFFER:
            return self.load(node, idx[0], valid)
        if op is Ops.CONST:
            return UOp.const(node.arg, node.dtype)
        if op in GroupOp.ALU:
            return UOp(op, node.dtype, tuple(self.value(s, idx, valid) for s in node.src))
        if op in (Ops.CAST, Ops.BITCAST):
            return UOp(op, node.dtype, (self.value(node.src[0], idx, valid),))
        if op is Ops.DETACH:
            return self.value(node.src[0], idx, valid)
        if op is Ops.REDUCE_AXIS:
            return self._reduce(node, idx, valid)
        if op in GroupOp.Movement:
            return self._movement(node, idx, valid)
        raise ValueError(f"{op!r} must be realized before a kernel can read it (the scheduler missed it)")

    def _movement(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
        source = node.src[0]
        old_shape = shape_of(source)
        op, arg = node.op, node.arg
        if op is Ops.RESHAPE:
            return self.value(source, indexing.reshape_index(idx, shape_of(node), old_shape), valid)
        if op is Ops.PERMUTE:
            return self.value(source, indexing.permute_index(idx, arg), valid)
        if op is Ops.EXPAND:
            return self.value(source, indexing.expand_index(idx, old_shape), valid)
        if op is Ops.SHRINK:
            return self.value(source, indexing.shrink_index(idx, arg), valid)
        if op is Ops.FLIP:
            return self.value(source, indexing.flip_index(idx, arg, old_shape), valid)
        # PAD: read the source only where the index is inside it, 0 elsewhere
        source_idx, inside = indexing.pad_index(idx, arg, old_shape)
        if inside is None:
            return self.value(source, source_idx, valid)
        inside = inside.simplify()
        gate = inside if valid is None else valid & inside
        return inside.where(self.value(source, source_idx, gate), UOp.const(0, node.dtype))

    def _reduce(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
        source = node.src[0]
        op, axes = node.arg.op, node.arg.axes
        source_shape = shape_of(source)
        if any(source_shape[axis] == 0 for axis in axes):
            return UOp.const(reduce_identity(op, node.dtype), node.dtype)
        source_idx = list(idx)
        ranges = []
        for axis in axes:
            if source_shape[axis] == 1:
                continue
            rng = self.new_range(source_shape[axis], AxisType.REDUCE)
            source_idx[axis] = rng
            ranges.append(rng)
        return self.value(source, tuple(source_idx), valid).reduce(*ranges, arg=op)

    # -------------------------------------------------------------------------------- stores

    def store_address(self, target: UOp, idx: Index) -> UOp:
        """The INDEX an ASSIGN writes element `idx` of `target` to (target: movement ops over a buffer)."""
        loaded = self.value(target, idx)
        if loaded.op is not Ops.LOAD or loaded.src[0].op is not Ops.INDEX or len(loaded.src[0].src) != 2:
            raise AssignError(f"cannot assign to a view that is padded or computed (target shape {shape_of(target)})")
        return loaded.src[0]


def kernel_name(output_ranges: Index, reduce_ranges: list[UOp]) -> str:
    """`E_4_4` for elementwise kernels, `r_<output sizes>_<reduce sizes>` for kernels with a reduction."""
    sizes = [str(r.src[0].arg) for r in output_ranges if r.op is Ops.RANGE] or ["1"]
    if not reduce_ranges:
        return "E_" + "_".join(sizes)
    return "r_" + "_".join(sizes + [str(r.src[0].arg) for r in reduce_ranges])


@dataclass(frozen=True)
class Kernel:
    """A kernel AST and the BUFFER nodes its PARAMs stand for (slot order; slot 0 is written)."""

    ast: UOp
    buffers: tuple[UOp, ...]


def build_kernel(point: UOp, output: UOp, storage: dict[UOp, UOp]) -> Kernel:
    """The kernel that computes realize point `point` into BUFFER `output` (for ASSIGN: into its target)."""
    builder = KernelBuilder({node: buf for node, buf in storage.items() if node is not point})
    shape = shape_of(point)
    output_param = builder.param(output)
    idx = builder.ranges_for(shape, AxisType.LOOP)
    if point.op is Ops.ASSIGN:
        target, computed = point.src
        address = builder.store_address(target, idx)
    else:
        computed = point.src[0] if point.op is Ops.CONTIGUOUS else point
        address = output_param.index(indexing.flat_index(idx, shape))
    value = builder.value(computed, idx)
    if value.dtype is not output.dtype:
        raise TypeError(f"kernel stores {value.dtype!r} into a {output.dtype!r} buffer")
    store = address.store(value)
    reduce_ranges = [u for u in store.toposort() if u.op is Ops.RANGE and u.arg.axis_type is AxisType.REDUCE]
    reduce_ranges.sort(key=lambda r: r.arg.axis_id)
    info = KernelInfo(name=kernel_name(idx, reduce_ranges))
    ast = graph_rewrite(UOp.sink(store, arg=info), indexing.simplify_indices, name="simplify indices")
    return Kernel(ast, tuple(builder.buffers))
