"""The tensor graph: the UOps that tg.tensor builds and the scheduler turns into kernels.

This module is the contract between the Tensor front end and the scheduler. Every node of a tensor graph has
an element `dtype` and a shape, given by `shape_of`. The nodes are:

| op            | src                         | arg                               | shape                          |
|---------------|-----------------------------|-----------------------------------|--------------------------------|
| BUFFER        | (DEVICE,)                   | BufferArg(uid, size)              | (size,)                        |
| CONST         | (DEVICE,)                   | the Python value                  | ()                             |
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
| CONTIGUOUS    | (x,)                        | None                              | x's shape; forces a buffer     |
| COPY          | (x, DEVICE)                 | None                              | x's shape, on another device   |
| ASSIGN        | (target, value)             | None                              | target's shape; writes value   |
|               |                             |                                   | into target's buffer           |
| DETACH        | (x,)                        | None                              | x's shape (autograd stops)     |

A BUFFER is flat storage; a Tensor on a buffer is a RESHAPE (and further movement ops) of it. A CONST is a
scalar on a device; a constant Tensor is that CONST reshaped to all-ones and expanded. PAD fills with zero
(the value that makes a padded sum correct); other fill values are a WHERE over a padded mask.
"""

from __future__ import annotations

import itertools
import math
import weakref

from tg.codegen.dtype import DType
from tg.codegen.uop.args import BufferArg, ReduceArg  # noqa: F401 - graph builders import both from here
from tg.codegen.uop.ops import GroupOp, Ops, UOp

Shape = tuple[int, ...]


_next_buffer_uid = itertools.count()


def device_node(device: str) -> UOp:
    return UOp(Ops.DEVICE, arg=device)


def new_buffer(device: str, size: int, dtype: DType) -> UOp:
    """A fresh BUFFER node: distinct from every other buffer, even one of the same size and dtype."""
    return UOp(Ops.BUFFER, dtype, (device_node(device),), BufferArg(next(_next_buffer_uid), size))


def const_node(value: object, dtype: DType, device: str) -> UOp:
    return UOp(Ops.CONST, dtype, (device_node(device),), value)


class ShapeError(ValueError, RuntimeError):
    """A tensor-graph node whose shape makes no sense (the message names the shapes involved).

    Both a ValueError (what tinygrad raises) and a RuntimeError (what torch raises), so code written for either
    catches it."""


_shapes: weakref.WeakKeyDictionary[UOp, Shape] = weakref.WeakKeyDictionary()


def shape_of(node: UOp) -> Shape:
    """The shape of a tensor-graph node (memoized; UOps are immutable)."""
    found = _shapes.get(node)
    if found is None:
        # sources first, in graph order, so that a deep graph needs no deep recursion
        for inner in node.toposort(lambda u: u not in _shapes and u.op is not Ops.DEVICE):
            if inner not in _shapes and inner.op is not Ops.DEVICE:
                _shapes[inner] = _infer_shape(inner)
        found = _shapes[node]
    return found


def _infer_shape(node: UOp) -> Shape:
    op, arg = node.op, node.arg
    if op is Ops.BUFFER:
        return (arg.size,)
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
    if op in GroupOp.ALU:
        shapes = {shape_of(s) for s in node.src}
        if len(shapes) != 1:
            raise ShapeError(f"{op.name} needs operands of one shape, got {' and '.join(map(str, sorted(shapes)))}")
    return source


def numel(shape: Shape) -> int:
    return math.prod(shape)
