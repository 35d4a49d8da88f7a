"""The tensor graph: the UOps that tg.tensor builds and the scheduler turns into kernels.

This module is the contract between the Tensor front end and the scheduler. Every node of a tensor graph has
an element `dtype` and a shape, given by `shape_of`. The nodes are:

| op            | src                         | arg                               | shape                          |
|---------------|-----------------------------|-----------------------------------|--------------------------------|
| BUFFER        | (DEVICE,)                   | BufferArg(uid, size)              | (size,)                        |
| CONST         | (DEVICE,)                   | the Python value (or a symbolic   | ()                             |
|               |                             | int: an index UOp of variables)   |                                |
| DEVICE        | ()                          | the device name, e.g. "CPU"       | (no shape: not a value)        |
| ALU ops       | operands of equal shape     | as in kernels                     | the operands' shape            |
| CAST, BITCAST | (x,)                        | None                              | x's shape (same itemsize)      |
| REDUCE_AXIS   | (x,)                        | ReduceArg(op, axes)               | x's shape, reduced axes -> 1   |
| RESHAPE       | (x,)                        | new shape                         | arg                            |
| PERMUTE       | (x,)                        | axis order                        | x's axes reordered             |
| EXPAND        | (x,)                        | new shape (1-axes grow)           | arg                            |
| PAD           | (x,)                        | ((before, after), ...) per axis   | grown by the padding           |
| SHRINK        | (x,)                        | ((start, end), ...) per axis      | end - start per axis           |
| FLIP          | (x,)                        | (bool, ...) per axis              | x's shape                      |
| CONTIGUOUS    | (x,)                        | None, or KEPT_COPY                | x's shape; forces a buffer     |
| COPY          | (x, DEVICE)                 | None                              | x's shape, on another device   |
| ASSIGN        | (target, value)             | None                              | target's shape; writes value   |
|               |                             |                                   | into target's buffer           |
| DETACH        | (x,)                        | None                              | x's shape (autograd stops)     |
| GATHER        | (x, index, ...)             | the axes of x the indices replace | the indices' shape             |
| MULTI         | (shard per device, ...)     | the split axis, or None (copies)  | the shards side by side        |

A MULTI (a Tensor split across devices, tg.tensor.multi) never reaches the scheduler: tg.tensor lowers every graph
over one into a graph per device first.

A GATHER reads x at positions held in data: element o is x at o, with axis `arg[k]` replaced by the k-th index
tensor's value at o (all indices share one shape, of x's rank, equal to x's on the other axes, where a size-1 axis
of x is broadcast). An index outside its axis reads 0. It costs one load per element, where a comparison with
every position would cost the axis size.

A BUFFER is flat storage; a Tensor on a buffer is a RESHAPE (and further movement ops) of it. A CONST is a
scalar on a device; a constant Tensor is that CONST reshaped to all-ones and expanded. PAD fills with zero
(the value that makes a padded sum correct); other fill values are a WHERE over a padded mask. A CONTIGUOUS marked
KEPT_COPY (a matmul's packed weight: a new layout of one buffer) may be kept by the engine and reused by later
schedules while that buffer is unchanged (see tg.hcq.engine.kept).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from tg.codegen.dtype import DType, dtypes
from tg.codegen.uop.args import BufferArg, ReduceArg  # noqa: F401 - graph builders import both from here
from tg.codegen.uop.ops import GroupOp, Ops, UOp

Shape = tuple["int | UOp", ...]  # a size may be symbolic: an index UOp of bound variables


_next_buffer_uid = itertools.count()
KEPT_COPY = "kept copy"  # the arg of a CONTIGUOUS whose buffer the engine may keep and reuse (see the table above)


def device_node(device: str) -> UOp:
    return UOp(Ops.DEVICE, arg=device)


def device_of(node: UOp) -> str:
    """The device a tensor-graph node lives on: a COPY's destination, else that of the buffer or constant it comes
    from (a WHERE's through its value, not its condition)."""
    while True:
        if node.op in (Ops.BUFFER, Ops.CONST):
            return node.src[0].arg
        if node.op is Ops.COPY:
            return node.src[1].arg
        node = node.src[1] if node.op in (Ops.WHERE, Ops.CALL) else node.src[0]  # (a call: its first argument)


def new_buffer(device: str, size: int, dtype: DType) -> UOp:
    """A fresh BUFFER node: distinct from every other buffer, even one of the same size and dtype."""
    return UOp(Ops.BUFFER, dtype, (device_node(device),), BufferArg(next(_next_buffer_uid), size))


def const_node(value: object, dtype: DType, device: str) -> UOp:
    return UOp(Ops.CONST, dtype, (device_node(device),), value)


class ShapeError(ValueError, RuntimeError):
    """A tensor-graph node whose shape makes no sense (the message names the shapes involved).

    Both a ValueError (what tinygrad raises) and a RuntimeError (what torch raises), so code written for either
    catches it."""


def shape_of(node: UOp) -> Shape:
    """The shape of a tensor-graph node (memoized on the node, which is immutable: a Tensor asks for its shape many
    times while an expression is built)."""
    try:
        return node._shape
    except AttributeError:
        pass
    if all(hasattr(s, "_shape") or s.op is Ops.DEVICE for s in node.src):  # the common case: sources are known
        _store_shape(node)
    else:  # sources first, in graph order, so that a deep graph needs no deep recursion
        for inner in node.toposort(lambda u: not hasattr(u, "_shape") and u.op not in (Ops.DEVICE, Ops.CALL)):
            if not hasattr(inner, "_shape") and inner.op is not Ops.DEVICE:
                _store_shape(inner)
    return node._shape


def remember_shape(node: UOp, shape: Shape) -> None:
    """Record the shape of a node a builder made and knows the shape of (int sizes only: a symbolic size is stored in
    its canonical form by `_store_shape`), so that `shape_of` need not walk to it later. A node met again (UOps are
    hash-consed) keeps the shape it has."""
    if not hasattr(node, "_shape") and not is_symbolic_shape(shape):
        object.__setattr__(node, "_shape", shape)


def _store_shape(node: UOp) -> None:
    shape = _infer_shape(node)
    object.__setattr__(node, "_shape", tuple(map(canonical_size, shape)) if is_symbolic_shape(shape) else shape)


def _infer_shape(node: UOp) -> Shape:
    op, arg = node.op, node.arg
    if op is Ops.BUFFER:
        return (arg.size,)
    if op is Ops.CALL:  # a value call has its body's shape; a custom kernel (void) has no value of its own
        return () if node.dtype is dtypes.void else shape_of(node.src[0])
    if op is Ops.PARAM:  # a call's placeholder (Tensor.as_param): flat storage, shaped by a RESHAPE above it
        return (node.ptrdtype.size,)
    if op is Ops.CONST:
        return ()
    if op in (Ops.RESHAPE, Ops.EXPAND):
        return tuple(arg)
    source = shape_of(node.src[0])
    if op is Ops.PERMUTE:
        return tuple(source[axis] for axis in arg)
    if op is Ops.PAD:
        return tuple(size + before + after for size, (before, after) in zip(source, arg, strict=True))
    if op is Ops.SHRINK:
        return tuple(end - start for start, end in arg)
    if op is Ops.REDUCE_AXIS:
        return tuple(1 if axis in arg.axes else size for axis, size in enumerate(source))
    if op is Ops.GATHER:
        return _gather_shape(node, source)
    if op is Ops.MULTI:  # (lowered per device by tg.tensor.multi before scheduling: the shards side by side)
        return tuple(size * len(node.src) if axis == arg else size for axis, size in enumerate(source))
    if op in GroupOp.ALU:
        shapes = {shape_of(s) for s in node.src}
        if len(shapes) != 1:
            raise ShapeError(f"{op.name} needs operands of one shape, got {' and '.join(sorted(map(str, shapes)))}")
    return source


def _gather_shape(node: UOp, source: Shape) -> Shape:
    index_shapes = {shape_of(index) for index in node.src[1:]}
    if len(index_shapes) != 1:
        raise ShapeError(f"GATHER needs index tensors of one shape, got {' and '.join(sorted(map(str, index_shapes)))}")
    (shape,) = index_shapes
    others = [(a, b) for axis, (a, b) in enumerate(zip(shape, source)) if axis not in node.arg]  # noqa: B905
    others_match = all(a == b or b == 1 for a, b in others)
    if len(shape) != len(source) or not others_match or not all(0 <= axis < len(source) for axis in node.arg):
        raise ShapeError(f"GATHER along axes {node.arg} of {source}: index shape {shape} must match on the others")
    return shape


def numel(shape: Shape) -> int:
    """The number of elements of a shape of int sizes (see symbolic_numel and max_numel for symbolic ones)."""
    sizes: tuple[Any, ...] = shape
    return math.prod(sizes)


# ---------------------------------------------------------------------------------------------------- symbolic shapes
# A shape entry, a SHRINK bound or a PAD amount may be a symbolic integer: an index-typed UOp of variables. In a
# Tensor's graph each variable appears bound (BIND(DEFINE_VAR, value)); the scheduler unbinds them, so that one
# kernel (with the variable as a runtime argument) serves every value, and binds the results again.


def is_symbolic_shape(shape: tuple) -> bool:
    return UOp in map(type, shape)  # (by type: UOp has no subclasses, and every new graph node asks this)


def canonical_size(size: int | UOp) -> int | UOp:
    """A size in its simplest form, so that equal sizes compare equal (`n+1-1` is `n`; a constant is an int)."""
    if not isinstance(size, UOp):
        return size
    size = size.simplify()
    return int(size.arg) if size.op is Ops.CONST else size


def symbolic_numel(shape: tuple) -> int | UOp:
    """The number of elements of `shape` (a UOp when a size is symbolic)."""
    total: Any = math.prod(shape)  # an int, or a UOp product when a size is symbolic
    return canonical_size(total)


def max_numel(shape: tuple) -> int:
    """The number of elements of `shape` at its largest (what a buffer of a symbolic shape is allocated for)."""
    return int(math.prod(int(s.vmax) if isinstance(s, UOp) else s for s in shape))


def _arg_nodes(arg: object) -> list[UOp]:
    if isinstance(arg, UOp):
        return [arg]
    if isinstance(arg, tuple):
        return [node for item in arg for node in _arg_nodes(item)]
    return []


def _map_arg(arg: object, mapping: dict[UOp, UOp]) -> object:
    if isinstance(arg, UOp):
        return arg.substitute(mapping)
    if isinstance(arg, tuple):
        return tuple(_map_arg(item, mapping) for item in arg)
    return arg


_ARG_OPS = frozenset({*GroupOp.Movement, Ops.CONST})  # the ops whose arg may hold a symbolic int


def _has_node(arg: tuple) -> bool:
    """Whether a movement arg (sizes, or (start, end) pairs) holds a UOp: the fast check every realize makes."""
    for item in arg:  # (a plain loop: generator expressions cost more than the check itself here)
        kind = type(item)
        if kind is UOp or (kind is tuple and UOp in map(type, item)):
            return True
    return False


def symbolic_args(node: UOp) -> list[UOp]:
    """The symbolic integers in a node's arg: a movement's (a reshape to (n, 4), a shrink to (0, n)) or a CONST's
    value (`x / n`)."""
    if node.op is Ops.CONST:
        return [node.arg] if type(node.arg) is UOp else []
    if node.op in GroupOp.Movement and _has_node(node.arg):
        return _arg_nodes(node.arg)
    return []


def substitute_in_args(roots: tuple[UOp, ...], mapping: dict[UOp, UOp]) -> tuple[UOp, ...]:
    """`roots` with `mapping` applied inside the symbolic args of their movement nodes (sources are rebuilt)."""
    new: dict[UOp, UOp] = {}
    for node in UOp.sink(*roots).toposort():
        src = tuple(new[s] for s in node.src)
        arg = _map_arg(node.arg, mapping) if symbolic_args(node) else node.arg
        same = arg is node.arg and all(a is b for a, b in zip(src, node.src, strict=True))
        new[node] = node if same else node.replace(src=src, arg=arg)
    return tuple(new[root] for root in roots)


def unbind_graph(roots: tuple[UOp, ...], order: list[UOp] | None = None) -> tuple[tuple[UOp, ...], dict[str, int]]:
    """`roots` with every bound variable (BIND) in a shape replaced by its variable, and the value of each variable
    by name (`order`: the graph's toposort, when the caller has it). A variable bound to two values in one graph, or
    a variable left unbound, is an error."""
    binds: dict[UOp, UOp] = {}
    values: dict[str, int] = {}
    variables: dict[str, UOp] = {}
    for node in UOp.sink(*roots).toposort() if order is None else order:
        if node.op not in _ARG_OPS:  # the common case, checked inline: this walk runs at every realize
            continue
        for expression in symbolic_args(node):
            for part in expression.toposort(lambda u: u.op is not Ops.BIND):
                if part.op is Ops.BIND:
                    variable, value = part.unbind()
                    if variables.setdefault(variable.arg.name, variable) is not variable:
                        other = variables[variable.arg.name].arg
                        raise ValueError(f"two variables named {other.name} in one graph: ranges [{other.vmin}, "
                                         f"{other.vmax}] and [{variable.arg.vmin}, {variable.arg.vmax}]")  # fmt: skip
                    if values.setdefault(variable.arg.name, value) != value:
                        raise ValueError(f"variable {variable.arg.name} is bound to both {values[variable.arg.name]} "
                                         f"and {value} in one graph")  # fmt: skip
                    binds[part] = variable
                elif part.op is Ops.DEFINE_VAR:
                    name = part.arg.name
                    raise ValueError(f"variable {name} is used in a shape without a value: bind it first "
                                     f"(Variable({name!r}, {part.arg.vmin}, {part.arg.vmax}).bind(value))")  # fmt: skip
    if not binds:
        return roots, {}
    return substitute_in_args(roots, binds), values


def bind_graph(roots: tuple[UOp, ...], values: dict[str, int]) -> tuple[UOp, ...]:
    """The inverse of `unbind_graph`: each variable in a shape bound to its value again."""
    if not values:
        return roots
    variables = {
        part
        for node in UOp.sink(*roots).toposort()
        for expression in symbolic_args(node)
        for part in expression.toposort()
        if part.op is Ops.DEFINE_VAR
    }
    return substitute_in_args(roots, {v: v.bind(values[v.arg.name]) for v in variables})
