"""The Tensor: a lazy n-dimensional array whose operations build a tensor graph (see tg.codegen.schedule.graph).

A Tensor holds `uop`, a tensor-graph node, and its `device`. Every operation returns a new Tensor over a new node;
nothing runs until `realize()` or a read (`numpy()`, `tolist()`, `item()`), which hand the graph to the engine.
The op families live in their own modules and are mixed in here: creation, elementwise, unary, movement,
indexing, reduce.
"""

from __future__ import annotations

import math
import weakref
from pathlib import PurePath
from typing import Any

from tg.codegen import DType, Ops, UOp, dtypes, to_numpy
from tg.codegen.schedule.graph import Shape, ShapeError, shape_of, symbolic_numel
from tg.tensor.advanced_indexing import AdvancedIndexingOps
from tg.tensor.autograd import AutogradOps, remember_former_uop
from tg.tensor.call import CallOps
from tg.tensor.conv import ConvOps
from tg.tensor.creation import CreationOps, canonical_device, const_of_shape, node_from_data, node_from_path
from tg.tensor.custom_kernel import has_calls, run_calls
from tg.tensor.elementwise import ElementwiseOps
from tg.tensor.errors import ArgumentError
from tg.tensor.fp8 import fp8_cast, is_fp8
from tg.tensor.functional import FunctionalOps
from tg.tensor.gather_scatter import GatherScatterOps
from tg.tensor.indexing import IndexingOps
from tg.tensor.linalg import LinalgOps
from tg.tensor.math_ops import MathOps
from tg.tensor.movement import MovementOps
from tg.tensor.multi import MultiOps
from tg.tensor.promotion import DTypeMismatchError, dtype_argument, dtype_name
from tg.tensor.random import RandomOps
from tg.tensor.reduce import ReduceOps
from tg.tensor.shape_ops import ShapeOps
from tg.tensor.sorting import SortingOps
from tg.tensor.symbolic import concrete_size, shape_text, size_value
from tg.tensor.unary import UnaryMathOps


class Tensor(
    CreationOps,
    ElementwiseOps,
    UnaryMathOps,
    MovementOps,
    AdvancedIndexingOps,
    IndexingOps,
    ReduceOps,
    LinalgOps,
    ShapeOps,
    ConvOps,
    GatherScatterOps,
    SortingOps,
    RandomOps,
    MathOps,
    FunctionalOps,
    AutogradOps,
    CallOps,
    MultiOps,
):
    """A lazy tensor. `Tensor(data, device=, dtype=)` accepts Python scalars, nested lists, numpy arrays, bytes."""

    __slots__ = ("uop", "device", "grad", "_requires_grad", "_former_uops", "_view_of", "_views")
    __array_ufunc__ = None  # `numpy_array + tensor` calls Tensor.__radd__ instead of numpy's elementwise loop

    def __init__(
        self,
        data: Any = None,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ) -> None:
        dtype = dtype_argument(dtype)
        self.grad: Tensor | None = None
        self._view_of: ViewOf | None = None  # when this tensor is a view: what of
        self._views: weakref.WeakSet[Tensor] | None = None  # the live views taken of this tensor
        self.requires_grad = requires_grad
        if isinstance(data, PurePath):  # a file: mapped on its DISK device, read only when used
            self.uop, self.device = node_from_path(data, dtype)
            if device is not None:
                moved = self.to(device)
                self.uop, self.device = moved.uop, moved.device
            return
        if isinstance(device, (tuple, list)) and not (isinstance(data, UOp) and data.dtype is not dtypes.index):
            # host data or a constant for several devices: made on the default device, a whole copy on each
            copied = Tensor(data, dtype=dtype).shard(device)
            self.uop, self.device = copied.uop, copied.device
            return
        self.device = canonical_device(device)
        if isinstance(data, UOp) and (data.dtype is dtypes.index or data.op is Ops.BIND):  # a bound Variable (or
            # an expression of them): a Variable made with a dtype is a value of that dtype
            default = dtypes.default_int if data.dtype is dtypes.index else data.dtype
            self.uop = const_of_shape(data, (), dtype or default, self.device)
            return
        if isinstance(data, UOp):
            self.uop: UOp = data if dtype is None or data.dtype is dtype else UOp(Ops.CAST, dtype, (data,))
        else:
            self.uop = node_from_data(data, self.device, dtype)

    def _wrap(self, node: UOp) -> Tensor:
        """A new Tensor over `node`, on this tensor's device (already canonical: no need to parse it again)."""
        result = Tensor.__new__(Tensor)
        if Tensor.no_grad and not _reads_a_buffer(node):  # computed under no_grad: autograd stops here
            node = UOp(Ops.DETACH, node.dtype, (node,))
        result.uop, result.device, result.grad, result._requires_grad = node, self.device, None, None
        result._view_of, result._views = _view_relation(self, node), None
        if result._view_of is not None:
            base = result._view_of.base
            assert base is not None, "a view's base is alive while the view is made"
            base._add_view(result)
        return result

    def _add_view(self, view: Tensor) -> None:
        if self._views is None:
            self._views = weakref.WeakSet()
        self._views.add(view)

    # -------------------------------------------------------------------------------- properties

    @property
    def shape(self) -> Shape:
        return shape_of(self.uop)

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def size(self, dim: int | None = None) -> Shape | int | UOp:
        """The shape, or the size of axis `dim` (negative counts from the back), as torch's `size`."""
        if dim is None:
            return self.shape
        from tg.tensor.movement import normalize_axis

        return self.shape[normalize_axis(dim, self.ndim)]

    def numel(self) -> Any:
        """The number of elements (a symbolic integer when the shape is symbolic)."""
        return symbolic_numel(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def is_floating_point(self) -> bool:
        return dtypes.is_float(self.dtype)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return concrete_size(self.shape[0], "len()")

    def __repr__(self) -> str:
        return (
            f"<Tensor shape={shape_text(self.shape)} dtype={self.dtype!r} device={self.device!r} op={self.uop.op.name}>"
        )

    def __hash__(self) -> int:
        return id(self)

    def __reduce__(self) -> tuple:
        """A pickle carries the values (realized), not the graph: every unpickled tensor owns fresh storage, so
        loads never share memory with each other or with the original (a DISK tensor comes back on the default
        device rather than writing its file)."""
        if isinstance(self.device, tuple):  # a sharded tensor comes back sharded alike, over fresh storage
            return (_unpickle_sharded, (bytes(self.data()), self.shape, self.dtype, self.device, self.shard_axis))
        device = None if self.device.startswith("DISK") else self.device
        return (_unpickle_tensor, (bytes(self.data()), self.shape, self.dtype, device))

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is ambiguous; use .item() or compare values after .numpy()")

    # -------------------------------------------------------------------------------- realizing and reading

    def realize(self, *others: Tensor, do_update_stats: bool = True) -> Tensor:
        """Run everything this tensor (and `others`) needs; each then reads realized memory. Returns self."""
        from tg.tensor.engine import realize

        tensors = (self, *others)
        built = tuple(t.uop for t in tensors)
        _run_writes_to_buffers_read(built)  # (first: a custom kernel below may read a buffer they write)
        roots = _with_calls_run(built)
        for tensor, realized in zip(tensors, realize(*_without_ran_assigns(roots)), strict=True):
            if realized is not tensor.uop and not _already_in(realized, tensor.uop):
                remember_former_uop(tensor, tensor.uop, realized)
            tensor.uop = realized
            if tensor._view_of is not None and tensor._view_of.base is None:
                tensor._view_of = None  # (its base is gone: let the graph it was built from go too)
        # the graph as built: its ASSIGNs ran (some with earlier ones read as buffers, some with the custom kernels
        # under them replaced by their outputs' buffers, new nodes)
        _note_ran_assigns(built)
        return self

    def data(self) -> memoryview:
        """The contents as C-contiguous bytes in this tensor's shape (realizing first if needed)."""
        from tg.tensor.engine import read_bytes

        if self.numel() == 0:
            return memoryview(b"")
        if isinstance(self.device, tuple):  # sharded: the shards gathered on the first device
            return self.to(self.device[0]).data()
        if _computed_on_disk(self):  # a view or computation of a file's contents: read where kernels run
            return self.to(None).data()
        self.realize()
        return read_bytes(self.uop, size_value(self.numel()) * self.dtype.itemsize)

    def numpy(self) -> Any:
        import numpy as np

        np_dtype = to_numpy(self.dtype)
        shape = tuple(size_value(size) for size in self.shape)  # a symbolic shape reads at its bound values
        if math.prod(shape) == 0:
            return np.zeros(shape, dtype=np_dtype)
        return np.frombuffer(self.data(), dtype=np_dtype).reshape(shape).copy()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> bool | int | float:
        if self.numel() != 1:
            raise ArgumentError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    # -------------------------------------------------------------------------------- storage and devices

    def contiguous(self) -> Tensor:
        """This value laid out in its own buffer when realized (the scheduler may reuse one that already is)."""
        return self._wrap(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def contiguous_backward(self) -> Tensor:
        """The same value; in tinygrad a hint that the gradient flowing back through here be made contiguous. The
        hint is accepted and the value passes unchanged; tg's gradients are not forced into their own buffer here."""
        return self

    def clone(self, device: str | None = None) -> Tensor:
        """A copy in fresh storage (on `device`, default this tensor's): writes to the clone never reach this
        tensor, and the reverse."""
        source = self if device is None else self.to(device)
        if isinstance(source.device, tuple):  # sharded: fresh storage split as the source is
            from tg.tensor.multi import empty_sharded

            storage = empty_sharded(self.shape, self.dtype, source.device, source.shard_axis)
            return Tensor(storage, device=source.device).assign(source)
        return Tensor.empty(self.shape, dtype=self.dtype, device=source.device).assign(source)

    def detach(self) -> Tensor:
        return self._wrap(UOp(Ops.DETACH, self.dtype, (self.uop,)))

    def replace(self, x: Tensor) -> Tensor:
        """Make this tensor stand for `x`'s value from now on (same shape and dtype), without an assign."""
        if x.shape != self.shape or x.dtype is not self.dtype:
            mine, theirs = f"{self.shape} {self.dtype!r}", f"{x.shape} {x.dtype!r}"
            raise ShapeError(f"replace needs the same shape and dtype: {mine} vs {theirs}")
        self.uop, self.device = x.uop, x.device
        return self

    def to_(self, device: str | None) -> Tensor:
        """Move this tensor itself to `device` (lazily); returns self."""
        moved = self.to(device)
        self.uop, self.device = moved.uop, moved.device
        return self

    def to(self, device: str | None) -> Tensor:
        """This tensor on `device` (None: the default device); the same tensor when it is already there."""
        if isinstance(device, (tuple, list)):  # several devices: a whole copy on each (see shard)
            return self if self.device == canonical_device(device) else self.shard(device)
        device = canonical_device(device)
        if device == self.device:
            return self
        from tg.codegen.schedule.graph import device_node

        if _computed_on_disk(self):  # a DISK device runs no kernels: compute where kernels run, then copy
            compute = canonical_device(None if device.startswith("DISK") else device)
            computed = Tensor(_read_disk_buffers_on(self.uop, compute), device=compute)
            return computed if compute == device else computed.to(device)
        return Tensor(UOp(Ops.COPY, self.dtype, (self.uop, device_node(device))), device=device)

    # -------------------------------------------------------------------------------- casts

    def cast(self, dtype: DType | str) -> Tensor:
        """Convert values to `dtype` (floats to ints truncate toward zero, anything to bool tests non-zero)."""
        dtype = dtype_argument(dtype)
        if dtype is self.dtype:
            return self
        if is_fp8(dtype) or is_fp8(self.dtype):  # saturating, and emulated for renderers without fp8
            return fp8_cast(self, dtype)
        return self._wrap(UOp(Ops.CAST, dtype, (self.uop,)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        """Reinterpret the bits as `dtype`. Another item size changes the last axis (torch's `view(dtype)`):
        (..., 8) uint8 becomes (..., 1) int64, and back; see tg.tensor.bit_reshape."""
        dtype = dtype_argument(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            from tg.tensor.bit_reshape import resized_bitcast

            return resized_bitcast(self, dtype)
        if dtype is self.dtype:
            return self
        return self._wrap(UOp(Ops.BITCAST, dtype, (self.uop,)))

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def double(self) -> Tensor:
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def short(self) -> Tensor:
        return self.cast(dtypes.int16)

    def bfloat16(self) -> Tensor:
        return self.cast(dtypes.bfloat16)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    # -------------------------------------------------------------------------------- assign and in-place ops

    def assign(self, value: Tensor | Any) -> Tensor:
        """Write `value` (broadcast to this shape) into this tensor's storage when realized; returns self."""
        if not isinstance(value, Tensor):
            value = Tensor(value, device=self.device, dtype=self.dtype)
        if value.device != self.device:
            raise ValueError(f"assign device mismatch: target is on {self.device}, value on {value.device}")
        if value.dtype is not self.dtype:
            raise DTypeMismatchError(
                f"assign dtype mismatch: target is {dtype_name(self.dtype)}, value is {dtype_name(value.dtype)}"
            )
        if value.shape != self.shape:
            try:
                value = value.expand(self.shape)
            except ShapeError:
                message = f"cannot assign a value of shape {value.shape} to a tensor of shape {self.shape}"
                raise ShapeError(message) from None
        if self._view_of is not None:
            return self._write_through_view(value)
        target = self.uop
        if not _reads_a_buffer(target):
            # no storage yet (a constant or a computed value): the value goes into fresh storage, lazily. Nothing
            # else can see the old value's storage, because it has none.
            if isinstance(self.device, tuple):  # storage split as this tensor is
                from tg.tensor.multi import empty_sharded

                target = empty_sharded(self.shape, self.dtype, self.device, self.shard_axis)
            else:
                target = Tensor.empty(self.shape, dtype=self.dtype, device=self.device).uop
        elif (unwritable := _unwritable_view_op(target)) is not None:
            raise ValueError(
                f"cannot assign into this {unwritable} view (shape {self.shape}): some of its elements have no "
                "storage of their own; write through t[indices] = value instead"
            )
        self.uop = UOp(Ops.ASSIGN, self.dtype, (target, value.uop))
        _ran_assigns.pop(self.uop, None)  # (an equal node that ran before: this is a new write, it runs again)
        _unrun_assigns.add(self.uop)
        if self._views:
            _refresh_views(self)
        return self

    def _write_through_view(self, value: Tensor) -> Tensor:
        """Assign into a view (`t[1]`, `t.T`, `t[::-1]`, `t.detach()`, views of views): the write lands in the
        tensor the view was taken from, as in torch, whether or not that tensor is realized yet."""
        relation = self._view_of
        assert relation is not None
        base, chain = relation.base, relation.chain()
        if base is None or chain is None:  # the base is gone, or was replaced since (replace(), to_()): no one
            self._view_of = None  # can see it, the write lands in this tensor's own storage
            return self.assign(value)
        _check_writable(chain, self.shape)
        current = relation.current_view()
        if (_reads_a_buffer(base.uop) and not any(op.op in (Ops.PAD, Ops.BITCAST) for op in chain)
                and _view_within_shards(current)):  # fmt: skip
            # a partial write into the storage (one kernel over the view's elements, as a KV-cache update needs);
            # a later realize of anything that reads this storage runs it first (see _run_writes_to_buffers_read)
            self.uop = UOp(Ops.ASSIGN, self.dtype, (_without_detach(current), value.uop))
            _ran_assigns.pop(self.uop, None)
            _unrun_view_writes.add(self.uop)  # (held: the view is often a temporary, `t[1][2] = 5`)
        else:
            base.assign(_placed(value, chain, base))
            self.uop = relation.current_view()
        relation.rebase()
        return self

    def __iadd__(self, other: Any) -> Tensor:
        return self.assign(self + other)

    def __isub__(self, other: Any) -> Tensor:
        return self.assign(self - other)

    def __imul__(self, other: Any) -> Tensor:
        return self.assign(self * other)

    def __itruediv__(self, other: Any) -> Tensor:
        return self.assign(self / other)

    def __ifloordiv__(self, other: Any) -> Tensor:
        return self.assign(self // other)

    def __imod__(self, other: Any) -> Tensor:
        return self.assign(self % other)

    def __ipow__(self, other: Any) -> Tensor:
        return self.assign(self**other)

    def __iand__(self, other: Any) -> Tensor:
        return self.assign(self & other)

    def __ior__(self, other: Any) -> Tensor:
        return self.assign(self | other)

    def __ixor__(self, other: Any) -> Tensor:
        return self.assign(self ^ other)

    def __ilshift__(self, other: Any) -> Tensor:
        return self.assign(self << other)

    def __irshift__(self, other: Any) -> Tensor:
        return self.assign(self >> other)


# An ASSIGN runs once. Graphs built before it ran may still hold its node (`c.assign(c + 1)`, then `y = x * c`,
# then `y.realize()` runs the assign; `c` and any other graph built on it still hold the ASSIGN node): a later
# realize reads the written buffer in its place instead of writing it again. UOps are hash-consed, so assign()
# building a node equal to one that ran (the same update of the same buffer) asks for it to run again.
_unrun_assigns: weakref.WeakSet[UOp] = weakref.WeakSet()
_ran_assigns: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()  # ASSIGN -> the view it wrote
_unrun_view_writes: set[UOp] = set()  # partial writes through views, held until they run


def _without_ran_assigns(roots: tuple[UOp, ...]) -> tuple[UOp, ...]:
    if not _ran_assigns:
        return roots
    return UOp.sink(*roots).substitute(dict(_ran_assigns)).src


def _note_ran_assigns(roots: tuple[UOp, ...]) -> None:
    """Record which not-yet-run ASSIGNs the realize of `roots` ran (walking the graph only when one is not a root)."""
    unrun = [*_unrun_assigns, *_unrun_view_writes]
    if not unrun:
        return
    direct = set(roots)
    ran = direct if all(node in direct for node in unrun) else set(UOp.sink(*roots).toposort())
    for node in unrun:
        if node in ran:
            _ran_assigns[node] = _written_view(node)
            _unrun_assigns.discard(node)
            _unrun_view_writes.discard(node)


def _run_writes_to_buffers_read(roots: tuple[UOp, ...]) -> None:
    """Run first the not-yet-run ASSIGNs (writes through views: `t[:2].assign(v)`) into storage that `roots` read
    without going through them, so that reading `t` afterwards sees the write, as in torch."""
    unrun = [*_unrun_assigns, *_unrun_view_writes]
    if not unrun:
        return
    graph = set(UOp.sink(*roots).toposort())
    read = {node for node in graph if node.op is Ops.BUFFER}
    writes = tuple(node for node in unrun if node not in graph and _written_buffer(node) in read)
    if writes:
        from tg.tensor.engine import realize

        realize(*_without_ran_assigns(_with_calls_run(writes)))
        _note_ran_assigns(writes)


def _with_calls_run(roots: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """`roots` with the custom kernels they depend on run and their outputs read from buffers (the engine's
    realize runs kernels of tg's IR only, tg.tensor.custom_kernel)."""
    return run_calls(roots) if has_calls(roots) else roots


def _already_in(realized: UOp, graph: UOp) -> bool:
    """Whether `realized` is a node of `graph`: `t.to(device)` of a sharded tensor with a whole copy on that device
    realizes to that copy's node, which must not be recorded as computed from a graph that reads it (autograd
    would restore that graph inside itself forever). Only graphs over sharded tensors realize that way. (A custom
    kernel's output, `AFTER(buffer, CALL)`, realizes to the buffer it wrote: a new value, not one already there.)"""
    from tg.tensor import multi

    return multi.made_any() and realized in graph.toposort(lambda node: node.op is not Ops.AFTER)


def _view_within_shards(view: UOp) -> bool:
    """Whether a view of a sharded tensor is a view of each shard's storage (a slice of the shard axis is not: a
    write through it rewrites the whole tensor instead). True for a tensor on one device."""
    from tg.tensor.multi import lower, needs_lowering, writes_storage

    if not needs_lowering([view]):
        return True
    lowered = lower([view])[0]
    return lowered.op is Ops.MULTI and all(writes_storage(shard) for shard in lowered.src)


def _written_buffer(node: UOp) -> UOp:
    while node.op in (*_VIEW_OPS, Ops.ASSIGN):
        node = node.src[0]
    return node


def pending_assigns() -> list[UOp]:
    """The ASSIGN nodes built by `assign` that no realize has run yet."""
    return [*_unrun_assigns, *_unrun_view_writes]


def _written_view(node: UOp) -> UOp:
    """What an ASSIGN (or a view of one) reads once it has run: the same view of the buffer it wrote."""
    if node.op is Ops.ASSIGN:
        return _written_view(node.src[0])
    if node.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP):
        return node.replace(src=(_written_view(node.src[0]), *node.src[1:]))
    return node


def _computed_on_disk(tensor: Tensor) -> bool:
    """Whether `tensor` lives on a DISK device but is not a whole buffer there (a view of a file, or math on one)."""
    from tg.codegen.schedule.realize import buffer_holding

    on_disk = isinstance(tensor.device, str) and tensor.device.startswith("DISK")
    return on_disk and buffer_holding(tensor.uop) is None


def _read_disk_buffers_on(node: UOp, device: str) -> UOp:
    """`node` with every DISK buffer it reads copied to `device` first (so its ops run there)."""
    from tg.codegen.schedule.graph import device_node

    target = device_node(device)
    disk = {n: UOp(Ops.COPY, n.dtype, (n, target)) for n in node.toposort()
            if n.op is Ops.BUFFER and n.src[0].arg.startswith("DISK")}  # fmt: skip
    return node.substitute(disk)


def _unpickle_sharded(data: bytes, shape: Shape, dtype: DType, devices: tuple[str, ...], axis: int | None) -> Tensor:
    return Tensor(data, dtype=dtype).reshape(shape).shard(devices, axis).contiguous().realize()


def _unpickle_tensor(data: bytes, shape: Shape, dtype: DType, device: str | None) -> Tensor:
    return Tensor(data, device=device, dtype=dtype).reshape(shape)


def _reads_a_buffer(node: UOp) -> bool:
    """Whether `node` is a BUFFER under movement ops (storage an ASSIGN can write into; sharded: every shard)."""
    while node.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP):
        node = node.src[0]
    if node.op is Ops.MULTI:
        return all(_reads_a_buffer(shard) for shard in node.src)
    return node.op in (Ops.BUFFER, Ops.ASSIGN)


def _unwritable_view_op(node: UOp) -> str | None:
    """'expanded' or 'padded' when movement ops above `node`'s storage broadcast it or add padding elements."""
    while node.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP):
        if node.op in (Ops.EXPAND, Ops.PAD):
            return "expanded" if node.op is Ops.EXPAND else "padded"
        node = node.src[0]
    return None


# ---------------------------------------------------------------------------------------------------- views

# (BITCAST of one item size: the same bytes read as another dtype, torch's `view(dtype)`)
_VIEW_OPS = (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.DETACH, Ops.BITCAST)


class ViewOf:
    """What a view Tensor was taken from: the base Tensor (never itself a view), the base's node then and the
    view's node then (movement ops and DETACH over the base's node)."""

    __slots__ = ("_base", "base_node", "view_node")

    def __init__(self, base: Tensor, base_node: UOp, view_node: UOp) -> None:
        # the base is held weakly: a view of an intermediate no one else holds (`x.sum(0)` reshapes a reduction)
        # must not keep it, or its graph, alive once the view is realized
        self._base, self.base_node, self.view_node = weakref.ref(base), base_node, view_node

    @property
    def base(self) -> Tensor | None:
        """The base Tensor, or None once nothing else holds it (nothing can then see writes to it)."""
        return self._base()

    def chain(self) -> list[UOp] | None:
        """The view's ops from the view down to the base (None when the base's node is no longer below it)."""
        ops, node = [], self.view_node
        while node is not self.base_node:
            if node.op not in _VIEW_OPS:
                return None
            ops.append(node)
            node = node.src[0]
        return ops

    def current_view(self) -> UOp:
        """The view over the base's node now (after writes and realizes of the base, which must be alive)."""
        base = self.base
        assert base is not None
        if base.uop is self.base_node:
            return self.view_node
        return self.view_node.substitute({self.base_node: base.uop})

    def rebase(self) -> None:
        """The base has a new node: the view's ops are now taken over it."""
        base = self.base
        assert base is not None
        self.view_node = self.current_view()
        self.base_node = base.uop


def _view_relation(source: Tensor, node: UOp) -> ViewOf | None:
    """How `node`, built by an op on `source`, is a view: movement ops and DETACH over source's node."""
    if node.op not in _VIEW_OPS:
        return None
    below = node.src[0]
    while below is not source.uop:
        if below.op not in _VIEW_OPS:
            return None
        below = below.src[0]
    relation = source._view_of
    base = None if relation is None else relation.base
    if relation is None or base is None or relation.chain() is None:  # (a chain of None: source's base has moved
        return ViewOf(source, source.uop, node)  # on since, so source is a copy, not a view)
    return ViewOf(base, relation.base_node, node.substitute({source.uop: relation.view_node}))


def _refresh_views(base: Tensor, writer: Tensor | None = None) -> None:
    """After a write into `base`: every live view of it (but the one that wrote) reads base's new node, as views
    of one storage do in torch."""
    for view in list(base._views or ()):
        relation = view._view_of
        if view is writer or relation is None or relation.base is not base:
            continue
        if relation.chain() is None:  # (the view was replaced by something else since)
            view._view_of = None
            continue
        relation.rebase()
        view.uop = relation.view_node


def _check_writable(chain: list[UOp], view_shape: Shape) -> None:
    """A clear error when some elements of the view are not elements of the base (broadcast or padding)."""
    for op in chain:
        if op.op is Ops.EXPAND:
            raise ValueError(f"cannot assign into this expanded view (shape {view_shape}): several of its elements "
                             "are one element of the tensor it views")  # fmt: skip
    if any(op.op is Ops.PAD for op in chain) and not _padding_is_never_viewed(chain):
        raise ValueError(f"cannot assign into this padded view (shape {view_shape}): some of its elements have no "
                         "storage of their own; write through t[indices] = value instead")  # fmt: skip


def _padding_is_never_viewed(chain: list[UOp]) -> bool:
    """Whether no padding element of a PAD in the chain reaches the view (a strided slice pads, then drops the
    padding): the chain run over a mask of real elements, in numpy."""
    import numpy as np

    bottom = tuple(size for size in shape_of(chain[-1].src[0]) if isinstance(size, int))
    if any(not isinstance(size, int) for op in chain for size in shape_of(op)) or len(bottom) != len(
        shape_of(chain[-1].src[0])
    ):
        return False
    real = np.ones(bottom, dtype=np.bool_)
    for op in reversed(chain):
        if op.op is Ops.RESHAPE:
            real = real.reshape(op.arg)
        elif op.op is Ops.PERMUTE:
            real = real.transpose(op.arg)
        elif op.op is Ops.FLIP:
            real = np.flip(real, tuple(i for i, f in enumerate(op.arg) if f))
        elif op.op is Ops.SHRINK:
            real = real[tuple(slice(b, e) for b, e in op.arg)]
        elif op.op is Ops.PAD:
            real = np.pad(real, op.arg, constant_values=False)
    return bool(real.all())


def _without_detach(node: UOp) -> UOp:
    """The view's movement ops over the base's storage, without the DETACH ops (a write target)."""
    if node.op is Ops.DETACH:
        return _without_detach(node.src[0])
    if node.op in _VIEW_OPS:
        below = _without_detach(node.src[0])
        return node if below is node.src[0] else node.replace(src=(below, *node.src[1:]))
    return node


def _placed(value: Tensor, chain: list[UOp], base: Tensor) -> Tensor:
    """The base's new value: `value` (view-shaped) at the base positions the view shows, the base elsewhere."""
    written: Tensor | None = None  # where the view's elements are, when it does not cover the whole base
    for op in chain:  # from the view down to the base: each op undone
        below = shape_of(op.src[0])
        if op.op is Ops.RESHAPE:
            value, written = value.reshape(below), None if written is None else written.reshape(below)
        elif op.op is Ops.PERMUTE:
            inverse = tuple(sorted(range(len(op.arg)), key=lambda i: op.arg[i]))
            value, written = value.permute(inverse), None if written is None else written.permute(inverse)
        elif op.op is Ops.FLIP:
            axes = [i for i, flipped in enumerate(op.arg) if flipped]
            value, written = value.flip(axes), None if written is None else written.flip(axes)
        elif op.op is Ops.SHRINK:
            padding = tuple((b, size - e) for (b, e), size in zip(op.arg, below, strict=True))
            if written is None:
                written = value.ones_like(dtype=dtypes.bool)
            value, written = value.pad(padding), written.pad(padding)
        elif op.op is Ops.BITCAST:
            value = value.bitcast(op.src[0].dtype)
        elif op.op is Ops.PAD:
            bounds = tuple((b, b + size) for (b, _), size in zip(op.arg, below, strict=True))
            value = value.shrink(bounds)
            written = (value.ones_like(dtype=dtypes.bool) if written is None else written).shrink(bounds)
    return value if written is None else written.where(value, base)
