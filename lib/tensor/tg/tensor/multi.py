"""Tensors split across devices: `t.shard(devices, axis)`, ops on sharded tensors, all-reduce, gathering.

    w = Tensor.randn(64, 10).shard(("CPU:0", "CPU:1"))           # axis None: every device holds all of w
    x = Tensor.randn(32, 64).shard(("CPU:0", "CPU:1"), axis=0)   # rows 0-15 on CPU:0, rows 16-31 on CPU:1
    loss = (x @ w).relu().sum()      # per-device kernels; the sum crosses the shard axis: an all-reduce
    loss.to("CPU").item()            # `to(device)` gathers the shards onto one device

A sharded tensor's node is a MULTI (one source per device, arg the split axis or None), and `device` is the tuple
of device names. Ops on it build the same logical graph as on one device (shapes are the whole tensor's), so
autograd, the optimizers and TinyJit see nothing new. Before the engine runs a graph, `lower` rewrites it into one
graph per device: an op whose operands are MULTIs becomes a MULTI of that op on each device's shards, with the
shard axis followed through movement ops; a reduce over the shard axis reduces each shard and then all-reduces the
partial results (naive: every device adds up copies of all the others'; ring: chunks travel around the devices;
all-to-all: each device reduces one chunk), so every device holds the whole result (axis None). A movement op that
would cut across shards (a pad, shrink or flip of the shard axis, a reshape that moves it) gathers the shards on
every device first: slower, but the values are the same.

The split axis must divide by the number of devices (as in tinygrad's newest `shard`), and the devices must be
distinct. `shard_shape` is one shard's shape; `shard_axis` the split axis.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.schedule.graph import Shape, device_node, device_of, shape_of
from tg.codegen.uop.ops import GroupOp
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.errors import ArgumentError
from tg.tensor.flags import ALL2ALL, RING

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

# above this many elements, on three or more devices, an all-reduce goes around a ring (or all-to-all) rather than
# every device reading every other's partial result (tinygrad's RING_ALLREDUCE_THRESHOLD)
RING_THRESHOLD = 256_000

_ELEMENTWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS, Ops.DETACH}


class MultiAxisError(ValueError):
    """A sharded tensor used with one whose shards split another axis where that cannot be reconciled."""


# ---------------------------------------------------------------------------------------------------- MULTI nodes

_made_any = False  # (until the first MULTI exists, no graph needs lowering: realize skips the search for one)
_devices: weakref.WeakKeyDictionary[UOp, tuple[str, ...]] = weakref.WeakKeyDictionary()  # MULTI -> its devices


def multi_node(shards: Sequence[UOp], axis: int | None, devices: tuple[str, ...] | None = None) -> UOp:
    """The MULTI of `shards` (one per device, in device order), split along `axis` (None: each is a whole copy).
    `devices`, when the caller knows them, saves finding them again."""
    global _made_any
    _made_any = True
    node = UOp(Ops.MULTI, shards[0].dtype, tuple(shards), axis)
    if devices is not None:
        _devices[node] = devices
    return node


def made_any() -> bool:
    """Whether any MULTI node was made in this process (until then no graph can hold one)."""
    return _made_any


def canonical_devices(devices: Sequence[str]) -> tuple[str, ...]:
    from tg.tensor.creation import canonical_device

    if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
        raise ArgumentError(f"shard needs a tuple of device names, got {devices!r}")
    names = tuple(canonical_device(d) for d in devices)
    if len(set(names)) != len(names):
        raise ArgumentError(f"shard needs distinct devices, got {tuple(devices)} (the same device twice)")
    return names


def concrete(size: int | UOp, what: str = "a sharded tensor's size") -> int:
    """`size` as an int: the shard bounds of a symbolic size are not known until it is bound."""
    if not isinstance(size, int):
        raise ArgumentError(f"{what} must be a concrete int to split across devices, not {size.render()}")
    return size


def shard_bounds(size: int, count: int, index: int) -> tuple[int, int]:
    step = size // count
    return index * step, (index + 1) * step


def _copy_to(node: UOp, device: str) -> UOp:
    return node if device_of(node) == device else UOp(Ops.COPY, node.dtype, (node, device_node(device)))


def _shrink_axis(node: UOp, axis: int, bounds: tuple[int, int]) -> UOp:
    shape = shape_of(node)
    arg = tuple(bounds if i == axis else (0, size) for i, size in enumerate(shape))
    return UOp(Ops.SHRINK, node.dtype, (node,), arg)


def shard_node(node: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
    """`node` (on one device) split along `axis` across `devices` (copied whole to each when axis is None)."""
    if axis is None:
        return multi_node([_copy_to(node, d) for d in devices], None)
    size = concrete(shape_of(node)[axis])
    return multi_node([_copy_to(_shrink_axis(node, axis, shard_bounds(size, len(devices), i)), d)
                       for i, d in enumerate(devices)], axis)  # fmt: skip


def replicate(build: Any, devices: tuple[str, ...]) -> UOp:
    """A MULTI of `build(device)` on each device: a constant or fresh storage made on every device alike."""
    return multi_node([build(d) for d in devices], None)


def empty_sharded(shape: Shape, dtype: Any, devices: tuple[str, ...], axis: int | None) -> UOp:
    """Fresh storage for a tensor of `shape` split along `axis` across `devices` (one shard's worth on each)."""
    from tg.tensor.creation import buffer_view, max_numel, new_buffer

    local = tuple(size // len(devices) if i == axis else size for i, size in enumerate(shape))
    return multi_node([buffer_view(new_buffer(d, max_numel(local), dtype), local) for d in devices], axis)


def devices_of(multi: UOp) -> tuple[str, ...]:
    """The devices of a MULTI's shards, in order (remembered: finding a device walks down the shard's graph)."""
    found = _devices.get(multi)
    if found is None:
        found = _devices[multi] = tuple(device_of(shard) for shard in multi.src)
    return found


# ---------------------------------------------------------------------------------------------------- lowering


def needs_lowering(nodes: Sequence[UOp]) -> bool:
    return _made_any and any(n.op is Ops.MULTI for n in UOp.sink(*nodes).toposort())


def lower(nodes: Sequence[UOp]) -> list[UOp]:
    """`nodes` as graphs per device: each a node on one device, or a MULTI whose sources are such nodes. A value call
    (Tensor.call) is inlined first, so the ops of its body over sharded arguments are lowered as if written out."""
    from tg.codegen.schedule.calls import inline_value_calls

    root = inline_value_calls(UOp.sink(*nodes))
    lowered: dict[UOp, UOp] = {}
    for node in root.toposort():
        if node.op is Ops.SINK:
            continue
        sources = tuple(lowered.get(s, s) for s in node.src)
        if not any(s.op is Ops.MULTI for s in sources) or node.op is Ops.MULTI:
            lowered[node] = node if sources == node.src else node.replace(src=sources)
        else:
            lowered[node] = _lower_one(node, sources)
    return [lowered.get(n, n) for n in root.src]


def _lower_one(node: UOp, sources: tuple[UOp, ...]) -> UOp:
    op = node.op
    devices = devices_of(next(s for s in sources if s.op is Ops.MULTI))
    sources = tuple(_constant_on(s, devices) for s in sources)
    if op in _ELEMENTWISE:
        return _elementwise(node, sources)
    if op is Ops.REDUCE_AXIS:
        return _reduce(node, sources[0])
    if op in GroupOp.Movement:
        return _movement(node, sources[0])
    if op is Ops.COPY:
        return _gather(sources[0], sources[1].arg)
    if op is Ops.ASSIGN:
        return _assign(node, sources)
    if op is Ops.CALL:
        return _call_on_each_device(node, sources)
    if op is Ops.AFTER:  # an output of a call: each shard after its device's call
        return _on_each_device(node, sources, sources[0].arg if sources[0].op is Ops.MULTI else None)
    return _on_each_device(node, [_replicated(s) if s.op is Ops.MULTI else s for s in sources])


def _constant_on(node: UOp, devices: tuple[str, ...]) -> UOp:
    """A constant made on one device (autograd's zeros and ones are made where a node's first shard is) as a whole
    copy on each of `devices`; any other node unchanged."""
    if node.op in (Ops.MULTI, Ops.DEVICE) or not node.src:
        return node
    chain = [node]
    while chain[-1].op in (Ops.RESHAPE, Ops.EXPAND, Ops.CAST):  # (a constant is a CONST under these, nothing else)
        chain.append(chain[-1].src[0])
    if chain[-1].op is not Ops.CONST or not chain[-1].src:
        return node
    copies = []
    for device in devices:
        rebuilt = chain[-1].replace(src=(device_node(device),))
        for above in reversed(chain[:-1]):
            rebuilt = above.replace(src=(rebuilt, *above.src[1:]))
        copies.append(rebuilt)
    return multi_node(copies, None, devices)


def _on_each_device(node: UOp, sources: Sequence[UOp], axis: int | None = None) -> UOp:
    """`node` once per device over the per-device `sources` (MULTIs give their shard; a DEVICE names each device)."""
    multis = [s for s in sources if s.op is Ops.MULTI]
    devices = devices_of(multis[0])
    for other in multis[1:]:
        if devices_of(other) != devices:
            raise ArgumentError(f"operands are sharded across different devices: {devices} and {devices_of(other)}")
    per_device = []
    for i, device in enumerate(devices):
        mine = []
        for s in sources:
            if s.op is Ops.MULTI:
                mine.append(s.src[i])
            elif s.op is Ops.DEVICE:
                mine.append(device_node(device))
            elif s.op in (Ops.DEFINE_VAR, Ops.BIND, Ops.CONST) and not s.src:  # (symbolic sizes: no device)
                mine.append(s)
            else:
                raise ArgumentError(f"{node.op!r} mixes a sharded tensor with one on {device_of(s)}: shard it too")
        # (a scheduling hint tag describes the whole tensor, e.g. conv's weight-gradient chunks: not one shard)
        per_device.append(node.replace(src=tuple(mine), tag=None))
    return multi_node(per_device, axis, devices)


def _call_on_each_device(node: UOp, sources: tuple[UOp, ...]) -> UOp:
    """A custom kernel on sharded tensors: the same kernel (its placeholders have one shard's shape) once per device,
    on that device's shards. (The kernel AST, `sources[0]`, has no device: each device's call holds it as it is.)"""
    from tg.codegen.schedule.calls import is_output_call

    if is_output_call(node):
        raise ArgumentError("a call with output buffers takes tensors on one device, not sharded ones")
    arguments = sources[1:]
    if not all(a.op is Ops.MULTI for a in arguments):
        raise ArgumentError("a custom kernel mixes sharded tensors with tensors on one device: shard them all")
    devices = devices_of(arguments[0])
    if any(devices_of(a) != devices for a in arguments[1:]):
        raise ArgumentError(f"a custom kernel's tensors are sharded across different devices: {devices} and others")
    calls = [node.replace(src=(sources[0], *(a.src[i] for a in arguments))) for i in range(len(devices))]
    return multi_node(calls, None, devices)


def _elementwise(node: UOp, sources: tuple[UOp, ...]) -> UOp:
    axes = {s.arg for s in sources if s.op is Ops.MULTI and s.arg is not None}
    axis = min(axes) if axes else None  # (two split axes: the others are re-split to match the first)
    return _on_each_device(node, [_with_axis(s, axis) if s.op is Ops.MULTI else s for s in sources], axis)


def _with_axis(multi: UOp, axis: int | None) -> UOp:
    """`multi` split along `axis` instead (a whole copy on each device for None)."""
    if multi.arg == axis:
        return multi
    whole = multi if multi.arg is None else _replicated(multi)
    if axis is None:
        return whole
    size, count = concrete(shape_of(whole)[axis]), len(whole.src)
    if size % count:
        raise MultiAxisError(f"cannot split axis {axis} (size {size}) across {count} devices to match an operand")
    return multi_node([_shrink_axis(s, axis, shard_bounds(size, count, i)) for i, s in enumerate(whole.src)], axis)


def _concat(parts: Sequence[UOp], axis: int) -> UOp:
    """The parts (on one device, equal but for `axis`) side by side along `axis`: each padded into place, added."""
    total = sum(concrete(shape_of(p)[axis]) for p in parts)
    placed, offset = [], 0
    for part in parts:
        size = concrete(shape_of(part)[axis])
        pad = tuple((offset, total - offset - size) if i == axis else (0, 0) for i in range(len(shape_of(part))))
        placed.append(UOp(Ops.PAD, part.dtype, (part,), pad) if total != size else part)
        offset += size
    combine = Ops.OR if part.dtype is dtypes.bool else Ops.ADD
    result = placed[0]
    for other in placed[1:]:
        result = UOp(combine, result.dtype, (result, other))
    return result


def _gather(multi: UOp, device: str) -> UOp:
    """The whole tensor on `device`: a whole copy, or every shard copied there and joined."""
    devices = devices_of(multi)
    if multi.arg is None:
        return multi.src[devices.index(device)] if device in devices else _copy_to(multi.src[0], device)
    return _concat([_copy_to(s, device) for s in multi.src], multi.arg)


def _replicated(multi: UOp) -> UOp:
    """`multi` as a whole copy on each of its devices (an all-gather when it is split)."""
    if multi.arg is None:
        return multi
    return multi_node([_gather(multi, d) for d in devices_of(multi)], None)


def _reduce(node: UOp, source: UOp) -> UOp:
    reduced = _on_each_device(node, [source], source.arg)
    if source.arg is None or source.arg not in node.arg.axes:
        return reduced
    return all_reduce(node.arg.op, list(reduced.src))


def _movement(node: UOp, source: UOp) -> UOp:
    axis = source.arg
    if axis is None:
        return _on_each_device(node, [source], None)
    count, op, arg = len(source.src), node.op, node.arg
    shard = shape_of(source.src[0])[axis]
    if op is Ops.PERMUTE:
        return _on_each_device(node, [source], arg.index(axis))
    if op is Ops.EXPAND:
        return _on_each_device(node.replace(arg=_with_size(arg, axis, shard)), [source], axis)
    if op is Ops.SHRINK and arg[axis] == (0, shard * count):
        return _on_each_device(node.replace(arg=_with_size(arg, axis, (0, shard))), [source], axis)
    if (op is Ops.PAD and not any(arg[axis])) or (op is Ops.FLIP and not arg[axis]):
        return _on_each_device(node, [source], axis)
    if op is Ops.RESHAPE and (new_axis := _reshaped_axis(shape_of(node.src[0]), arg, axis, count)) is not None:
        return _on_each_device(node.replace(arg=_with_size(arg, new_axis, arg[new_axis] // count)), [source], new_axis)
    return _on_each_device(node, [_replicated(source)], None)  # (cuts across shards: gathered first)


def _with_size(arg: tuple, axis: int, value: Any) -> tuple:
    return tuple(value if i == axis else a for i, a in enumerate(arg))


def _reshaped_axis(old: Shape, new: tuple, axis: int, count: int) -> int | None:
    """The axis of the new shape that splits exactly as `axis` of the old one did, if any: every shard is the same
    run of elements when the sizes before it multiply to the same number and it divides by the device count."""
    before = math.prod(old[:axis])
    for i in range(len(new)):
        if isinstance(new[i], int) and math.prod(new[:i]) == before and new[i] % count == 0 and new[i] > 1:
            return i
    return None


def _assign(node: UOp, sources: tuple[UOp, ...]) -> UOp:
    target, value = sources
    if target.op is not Ops.MULTI:
        raise ArgumentError("assign device mismatch: a sharded value into a tensor on one device")
    if value.op is not Ops.MULTI:
        raise ArgumentError("assign device mismatch: a value on one device into a sharded tensor")
    if value.arg != target.arg and value.arg is not None:
        raise MultiAxisError(f"multi axis mismatch: the target is split along axis {target.arg}, the value along "
                             f"axis {value.arg}")  # fmt: skip
    for shard in target.src:
        if not writes_storage(shard):
            raise ArgumentError(
                "cannot assign into this view of a sharded tensor: it cuts across the shards "
                "(a slice, pad or flip of the shard axis); assign to the whole tensor instead"
            )
    return _on_each_device(node, [target, _with_axis(value, target.arg)], target.arg)


def writes_storage(node: UOp) -> bool:
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op in (Ops.BUFFER, Ops.ASSIGN)


# ---------------------------------------------------------------------------------------------------- all-reduce


def all_reduce(op: Ops, partials: list[UOp]) -> UOp:
    """Combine (ADD, MUL or MAX) the per-device partial results so that every device holds the whole result."""
    algorithm = all_reduce_algorithm(len(partials), math.prod(concrete(s) for s in shape_of(partials[0])))
    if algorithm == "naive":
        return _naive_all_reduce(op, partials)
    return _chunked_all_reduce(op, partials, ring=algorithm == "ring")


def all_reduce_algorithm(count: int, numel: int) -> str:
    """ "all2all", "ring" or "naive" for an all-reduce of `numel` elements over `count` devices: ALL2ALL=2 or RING=2
    force theirs; at 1, theirs is used above RING_THRESHOLD elements on three or more devices (ALL2ALL first)."""
    big = count > 2 and numel > RING_THRESHOLD
    if int(ALL2ALL) >= 2 or (big and int(ALL2ALL) >= 1):
        return "all2all"
    if int(RING) >= 2 or (big and int(RING) >= 1):
        return "ring"
    return "naive"


def _combine(op: Ops, a: UOp, b: UOp) -> UOp:
    return UOp(op, a.dtype, (a, b))


def _naive_all_reduce(op: Ops, partials: list[UOp]) -> UOp:
    """Every device adds up its own partial and a copy of each other device's."""
    devices = [device_of(p) for p in partials]
    results = []
    for device in devices:
        total = _copy_to(partials[0], device)
        for partial in partials[1:]:
            total = _combine(op, total, _copy_to(partial, device))
        results.append(total)
    return multi_node(results, None)


def _chunked_all_reduce(op: Ops, partials: list[UOp], ring: bool) -> UOp:
    """Reduce-scatter then all-gather over the flattened partials cut in one chunk per device. Ring: chunk c is
    carried from device c around the others, each adding its part, then copied from the last one to all. All-to-all:
    each device reduces one chunk from copies of every device's part, then every device copies every chunk."""
    count, shape = len(partials), tuple(concrete(s) for s in shape_of(partials[0]))
    numel = math.prod(shape)
    devices = [device_of(p) for p in partials]
    flat = [UOp(Ops.RESHAPE, p.dtype, (p,), (numel,)) for p in partials]
    step = -(-numel // count)
    chunks = [(lo, min(lo + step, numel)) for lo in range(0, numel, step)]
    reduced: list[tuple[UOp, int]] = []  # per chunk: its reduced value and the device holding it
    for c, bounds in enumerate(chunks):
        if ring:
            order = [(c + k) % count for k in range(count)]
            total = _shrink_axis(flat[order[0]], 0, bounds)
            for d in order[1:]:
                total = _combine(op, _copy_to(total, devices[d]), _shrink_axis(flat[d], 0, bounds))
            reduced.append((total, order[-1]))
        else:
            owner = c % count
            total = None
            for d in range(count):
                part = _copy_to(_shrink_axis(flat[d], 0, bounds), devices[owner])
                total = part if total is None else _combine(op, total, part)
            assert total is not None
            reduced.append((total, owner))
    results = []
    for device in devices:
        whole = _concat([_copy_to(total, device) for total, _ in reduced], 0)
        results.append(UOp(Ops.RESHAPE, whole.dtype, (whole,), tuple(shape)))
    return multi_node(results, None)


# ---------------------------------------------------------------------------------------------------- the Tensor API


class MultiOps(TensorBase):
    """shard, shard_, shard_like, shard_shape, shard_axis (see the module docstring)."""

    def shard(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """This tensor split along `axis` across `devices` (axis None: a whole copy on each device)."""
        from tg.tensor.movement import normalize_axis

        if isinstance(self.device, tuple):
            raise ArgumentError(f"this tensor is already sharded across {self.device}; gather it first (.to(device))")
        names = canonical_devices(devices)
        if axis is not None:
            axis = normalize_axis(axis, self.ndim)
            size = self.shape[axis]
            if not isinstance(size, int) or size % len(names):
                raise ArgumentError(f"cannot shard axis {axis} of shape {self.shape} across {len(names)} devices: "
                                    f"its size {size} does not divide by {len(names)}")  # fmt: skip
        from tg.tensor.tensor import Tensor

        return Tensor(shard_node(self.uop, names, axis), device=names)  # type: ignore[arg-type]

    def shard_(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
        """Shard this tensor itself (a model's weights in place); returns self."""
        sharded = self.shard(devices, axis)
        self.uop, self.device = sharded.uop, sharded.device
        return as_tensor(self)

    def shard_like(self, other: Tensor) -> Tensor:
        """This tensor sharded as `other` is (same devices and axis); unchanged when `other` is on one device."""
        if not isinstance(other.device, tuple):
            return self.to(other.device)
        return self.shard(other.device, other.shard_axis)

    @property
    def shard_axis(self) -> int | None:
        """The axis this sharded tensor is split along (None: a whole copy per device, or not sharded)."""
        if not isinstance(self.device, tuple):
            return None
        return lower([self.uop])[0].arg

    @property
    def shard_shape(self) -> Shape:
        """The shape of one device's shard (the whole shape when not sharded or copied whole)."""
        if not isinstance(self.device, tuple):
            return self.shape
        return shape_of(lower([self.uop])[0].src[0])


# ---------------------------------------------------------------------------------------------------- gradients


def _multi_gradient(grad: UOp, node: UOp) -> tuple[UOp | None, ...]:
    """A MULTI's sources get their part of the (logical, sharded) gradient, each on its own device. The copies of
    a whole-copy MULTI are one value: the first takes the gradient, so what they were copied from gets it once."""
    devices = devices_of(node)
    if node.arg is None:
        return (UOp(Ops.COPY, grad.dtype, (grad, device_node(devices[0]))), *(None for _ in devices[1:]))
    size = concrete(shape_of(node)[node.arg])
    return tuple(UOp(Ops.COPY, grad.dtype, (_shrink_axis(grad, node.arg, shard_bounds(size, len(devices), i)),
                                            device_node(d))) for i, d in enumerate(devices))  # fmt: skip


def _copy_gradient(grad: UOp, node: UOp) -> tuple[UOp | None, ...]:
    """A COPY's source gets the gradient back where it was: sharded as it was, when it was sharded."""
    source = node.src[0]
    if not needs_lowering([source]):
        return (UOp(Ops.COPY, grad.dtype, (grad, device_node(device_of(source)))), None)
    lowered = lower([source])[0]
    return (shard_node(grad, devices_of(lowered), lowered.arg), None)


def _register_gradients() -> None:
    from tg.tensor.autograd import GRADIENT_RULES

    GRADIENT_RULES[Ops.MULTI] = _multi_gradient
    GRADIENT_RULES[Ops.COPY] = _copy_gradient


_register_gradients()
