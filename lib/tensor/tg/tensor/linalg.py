"""Linear algebra: `matmul` (`@`), `dot`, `linear` and `einsum`, built from movement ops, a multiply and a sum.

A matrix product is a broadcast multiply followed by a sum over the shared axis: `(..., n, 1, k) * (..., 1, m, k)`
summed over `k`. The scheduler fuses the multiply into the reduction, so no `n*m*k` buffer is ever stored; the
kernel optimizer is what makes that loop fast. Sums accumulate as `Tensor.sum` does (16-bit floats in float32,
small ints in int32) and the result is cast back to the operands' promoted dtype, as torch does.

On the CPU a right operand whose column strips alias in the cache is first packed strip by strip (`packed_right`):
a GPT-2 MLP's 768x3072 and 3072x768 weights ran at a third of the speed of the 768x2304 one (issue 23). The packed
copy of a realized weight is kept by the engine (a CONTIGUOUS marked KEPT_COPY): later products with the same weight
read it without packing again, until the weight is written (an assign, an optimizer step).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tg.codegen import DType
from tg.codegen.schedule.graph import KEPT_COPY, ShapeError, shape_of
from tg.codegen.schedule.realize import reads_memory
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.tensor.autograd import Gradients, custom_gradient
from tg.tensor.elementwise import broadcast
from tg.tensor.promotion import broadcast_shapes, dtype_argument
from tg.tensor.reduce import sum_accumulator

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _multiply_and_sum(a: Tensor, b: Tensor, axes: tuple[int, ...], dtype: DType | None) -> Tensor:
    """sum(a * b) over `axes` (a and b broadcast), accumulated widely and returned in the promoted dtype."""
    a, b = broadcast(a, b)
    result_dtype = a.dtype if dtype is None else dtype
    accumulator = sum_accumulator(result_dtype)
    return (a.cast(accumulator) * b.cast(accumulator)).sum(axes).cast(result_dtype)


STRIP = 16  # the kernel heuristics' contiguous upcast: one strip row is one 64-byte cache line of float32
L2_SIZE_FILE = Path("/sys/devices/system/cpu/cpu0/cache/index2/size")
DEFAULT_L2_BYTES = 1 << 20
MIN_PACKED_ROWS = 32  # the kernel sweeps a strip once per 8 rows of the left operand: 4 sweeps pay for the copy
MIN_PACKED_ELEMENTS = 1 << 16  # a smaller operand (256 KiB of float32) is cheap to read in any layout


@functools.cache
def l2_bytes() -> int:
    """The CPU's per-core L2 cache size (Linux sysfs, e.g. "2048K"), 1 MiB where it cannot be read."""
    try:
        text = L2_SIZE_FILE.read_text().strip()
    except OSError:
        return DEFAULT_L2_BYTES
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units and text[:-1].isdigit() else DEFAULT_L2_BYTES


def strips_alias_in_cache(k: int, row_bytes: int) -> bool:
    """Whether a column strip of a row-major (k, m) operand misses the cache. The matmul kernel sweeps one strip
    (k lines, `row_bytes` apart) once per block of rows of the left operand, counting on it staying in L2. A cache
    picks a line's set from the low address bits, so lines a multiple of a power of two P apart use only
    1/(P/64) of the sets: at most L2/P of them fit. 768 rows 12 KiB apart (a 768x3072 weight) need more."""
    period = row_bytes & -row_bytes  # the largest power of two dividing the row size
    return k > l2_bytes() // period


def in_memory(node: UOp) -> bool:
    """Whether `node` is a view of a buffer the matmul reads anyway: a realized one, or a reduction (the scheduler
    gives a reduction that another reduction reads its own buffer, so attention's keys, slices of a qkv
    projection, are in memory)."""
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return (
        reads_memory(node) or node.op is Ops.REDUCE_AXIS or (node.op is Ops.CAST and node.src[0].op is Ops.REDUCE_AXIS)
    )


def transposed_view(node: UOp) -> bool:
    """A view that swaps the last two axes of memory (`w.T`, `key.transpose(-1, -2)`): the matmul's contiguous
    output axis then walks the operand with a large stride, so its vector lanes are gathers."""
    if node.op is not Ops.PERMUTE or not in_memory(node):
        return False
    order = node.arg
    return tuple(order[-2:]) == (len(order) - 1, len(order) - 2)


def realized_matrix(node: UOp) -> bool:
    """A whole realized buffer viewed as a matrix (a weight): the engine keeps its packed copy (KEPT_COPY)."""
    return node.op is Ops.RESHAPE and node.src[0].op is Ops.BUFFER


def worth_packing(left: Tensor, right: Tensor) -> bool:
    """Pack `right` when it is in CPU memory already (packing a computed one, say a dequantized weight, would store
    what the matmul otherwise computes on the fly), read by enough rows of `left` that each strip is swept several
    times, and either a realized weight that is not being trained (its packed copy is kept: only the first product
    after a write copies), a transposed view or a row-major matrix whose strips alias in the cache. The packed product
    is faster even where strips do not alias: GPT-2's 768x2304 and 768x768 weights (128 rows) 5.5 -> 3.7 ms and
    0.95 -> 0.90 ms, best of 15 at load 6; but a weight that requires grad changes at every step, and a copy per
    product made the first a wash and the second 1.7 ms."""
    if not all(isinstance(size, int) for size in (*left.shape, *right.shape)):
        return False  # a symbolic size: whether strips fit is not known when the kernel is built
    k, m = right.shape[-2], right.shape[-1]
    if m % STRIP or left.shape[-2] < MIN_PACKED_ROWS or math.prod(right.shape) < MIN_PACKED_ELEMENTS:
        return False
    if not in_memory(right.uop):
        return False
    if not (isinstance(right.device, str) and right.device.startswith("CPU")):
        return False
    if (realized_matrix(right.uop) and not right.requires_grad) or transposed_view(right.uop):
        return True
    return right.ndim == 2 and strips_alias_in_cache(k, m * right.dtype.itemsize)


def scattered_rows(node: UOp) -> bool:
    """A view of memory whose rows are pieces from several places: its last axis merges axes that a PERMUTE took out
    of memory order (attention's output, (heads, tokens, 64) transposed to (tokens, heads, 64) and reshaped to
    (tokens, 768): each row is 12 runs of 64, 32 KiB apart)."""
    if node.op is not Ops.RESHAPE or node.src[0].op is not Ops.PERMUTE or not in_memory(node):
        return False
    order, source_shape = node.src[0].arg, shape_of(node.src[0])
    merged, size = 0, 1
    while merged < len(source_shape) and size < shape_of(node)[-1]:
        merged += 1
        size *= source_shape[-merged]
    return tuple(order[-merged:]) != tuple(range(len(order) - merged, len(order)))


def contiguous_rows(left: Tensor) -> Tensor:
    """The left operand of a product, copied first when its rows are scattered (`scattered_rows`) and enough rows
    read it: GPT-2's attention output @ its 768x768 projection 2.0 -> 0.93 ms with the copy (best of 9, load 4.3)."""
    if left.shape[-2] < MIN_PACKED_ROWS or not all(isinstance(size, int) for size in left.shape):
        return left
    if not (isinstance(left.device, str) and left.device.startswith("CPU")) or not scattered_rows(left.uop):
        return left
    return left.contiguous()


def packed_right(left: Tensor, right: Tensor, batch: tuple[int, ...], dtype: DType | None) -> Tensor | None:
    """left @ right with `right` copied first into strips of STRIP columns, each strip's k rows contiguous
    ((..., m / STRIP, k, STRIP)), when `worth_packing` (None otherwise). The copy costs one pass over `right`; the
    product then reads each strip sequentially. Measured in CPU time, copy included: 128x768 @ 768x3072 22.8 ->
    9.8 ms, 1024^3 72 -> 24 ms, 512^3 with a transposed right operand (nn.Linear's x @ w.T) 66 -> 5 ms."""
    if not worth_packing(left, right):
        return None
    k, m, n = right.shape[-2], right.shape[-1], left.shape[-2]
    strips, outer = m // STRIP, right.shape[:-2]
    packed = right.reshape(outer + (k, strips, STRIP))
    order = tuple(range(len(outer)))
    packed = packed.permute(order + (len(outer) + 1, len(outer), len(outer) + 2))  # (..., strips, k, 16)
    packed = packed._wrap(UOp(Ops.CONTIGUOUS, packed.dtype, (packed.uop,), KEPT_COPY))  # kept while right is unchanged
    lead = lambda shape: (1,) * (len(batch) - len(shape)) + shape  # noqa: E731  (right-aligned batch axes)
    rows = left.reshape(lead(left.shape[:-2]) + (n, 1, k, 1)).expand(batch + (n, strips, k, STRIP))
    columns = packed.reshape(lead(outer) + (1, strips, k, STRIP)).expand(batch + (n, strips, k, STRIP))
    return _multiply_and_sum(rows, columns, (len(batch) + 2,), dtype).reshape(batch + (n, m))


def sum_to_shape(tensor: Tensor, shape: tuple) -> Tensor:
    """`tensor` summed over the axes that broadcasting added to `shape` or grew in it (undoes a broadcast). An added
    axis of size 1 is reshaped away, not summed: a sum would be a second reduction, which gets a kernel of its own."""
    extra = tensor.ndim - len(shape)
    summed = tuple(axis for axis in range(extra) if tensor.shape[axis] != 1)
    summed += tuple(extra + axis for axis, want in enumerate(shape) if tensor.shape[extra + axis] != want)
    if summed:
        tensor = tensor.sum(summed, keepdim=True)
    return tensor.reshape(shape)


def rows_of(tensor: Tensor) -> Tensor:
    """A batch of matrices (..., n, k) as one matrix of all their rows (batch * n, k)."""
    return tensor.reshape(-1, tensor.shape[-1])


def constant_view(node: UOp) -> bool:
    """A constant broadcast to a shape (the gradient of a sum): all its rows and columns are the same."""
    while node.op in GroupOp.Movement:
        node = node.src[0]
    return node.op is Ops.CONST


def gradient_product(left: Tensor, right: Tensor) -> Tensor:
    """left @ right inside the matmul's gradient rule. An output gradient that is one constant (a loss that sums the
    product) makes every row of g @ w^T the same, and every column of x^T @ g: one is computed and broadcast, not a
    product of 128 equal rows (a GPT-2 block's sum loss). Only gradients take this path: a constant leaf that
    requires grad would get its gradient in the first row only."""
    rows, columns = left.shape[-2], right.shape[-1]
    if rows > 1 and constant_view(left.uop):
        first_row = matmul(left.shrink((*(None,) * (left.ndim - 2), (0, 1), None)), right)
        return first_row.expand(first_row.shape[:-2] + (rows, columns))
    if columns > 1 and constant_view(right.uop):
        first_column = matmul(left, right.shrink((*(None,) * (right.ndim - 1), (0, 1))))
        return first_column.expand(first_column.shape[:-1] + (columns,))
    return matmul(left, right)


def differentiate_as_matmul(result: Tensor, left: Tensor, right: Tensor) -> None:
    """Give `result` = left @ right the textbook gradients, each a matmul of its own: d_left = g @ right^T and
    d_right = left^T @ g. Differentiating the primitives instead reduces the output gradient against the packed
    copy (or the broadcast operands) along axes that are not contiguous: a GPT-2 training step's input gradients
    ran at 0.2-50 GFLOP/s (issue 23), where as matmuls they get the product's layout (packing included) and opts."""
    if type(left).no_grad or not all(isinstance(size, int) for size in (*left.shape, *right.shape)):
        return  # nothing to differentiate, or a symbolic size: the primitives' gradients apply
    tensor_type, device = type(left), left.device
    left_node, right_node, left_shape, right_shape = left.uop, right.uop, left.shape, right.shape

    def rule(grad: UOp, wanted: tuple[bool, ...]) -> Gradients:
        g = tensor_type(grad, device=device)
        d_left = d_right = None
        if wanted[0]:
            right_t = tensor_type(right_node, device=device).transpose(-1, -2)
            d_left = sum_to_shape(gradient_product(g, right_t), left_shape).cast(left_node.dtype).uop
        if wanted[1]:
            left = tensor_type(left_node, device=device)
            if len(right_shape) == 2:  # a weight shared by every matrix of the batch: one product over all rows
                left, g = rows_of(left), rows_of(g)
            d_right = sum_to_shape(gradient_product(left.transpose(-1, -2), g), right_shape)
            d_right = d_right.cast(right_node.dtype).uop
        return (d_left, d_right)

    custom_gradient(result.uop, (left_node, right_node), rule)


def matmul(a: Tensor, b: Tensor, dtype: DType | None = None) -> Tensor:
    """numpy's matmul: 1-d operands are a row (left) or a column (right) that disappears from the result; leading
    axes broadcast."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul needs operands with at least one dimension, got shapes {a.shape} and {b.shape}")
    left = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
    right = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    if left.shape[-1] != right.shape[-2]:
        inner = f"inner sizes {left.shape[-1]} and {right.shape[-2]} differ"
        raise ShapeError(f"matmul of shapes {a.shape} and {b.shape}: {inner}")
    batch = broadcast_shapes(left.shape[:-2], right.shape[:-2])
    n, k, m = left.shape[-2], left.shape[-1], right.shape[-1]
    left = contiguous_rows(left)
    result = packed_right(left, right, batch, dtype)
    if result is None:
        rows = left.reshape(left.shape[:-1] + (1, k)).expand(batch + (n, m, k))
        columns = right.transpose(-1, -2).reshape(right.shape[:-2] + (1, m, k)).expand(batch + (n, m, k))
        result = _multiply_and_sum(rows, columns, (len(batch) + 2,), dtype)
    differentiate_as_matmul(result, left, right)
    if a.ndim == 1:
        result = result.reshape(result.shape[:-2] + (m,))
    if b.ndim == 1:
        result = result.reshape(result.shape[:-1])
    return result


@dataclass(frozen=True)
class EinsumSpec:
    """A parsed einsum formula: the letters of each input and of the output."""

    inputs: tuple[str, ...]
    output: str


def parse_einsum(formula: str, ranks: tuple[int, ...]) -> EinsumSpec:
    """Split 'ij,jk->ik'; without '->' the output is the letters seen once, in alphabetical order (numpy's rule).
    An ellipsis stands for the same leading axes in every operand (given capital letters internally)."""
    formula = formula.replace(" ", "")
    left, arrow, right = formula.partition("->")
    inputs = left.split(",")
    if len(inputs) != len(ranks):
        raise ValueError(f"einsum formula {formula!r} names {len(inputs)} operands, got {len(ranks)}")
    with_ellipsis = [(term, rank) for term, rank in zip(inputs, ranks, strict=True) if "..." in term]
    ellipsis_rank = max((rank - len(term.replace("...", "")) for term, rank in with_ellipsis), default=0)
    broadcast_letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:ellipsis_rank]
    inputs = [_expand_ellipsis(term, rank, broadcast_letters) for term, rank in zip(inputs, ranks, strict=True)]
    if arrow:
        output = right.replace("...", broadcast_letters)
    else:
        letters = "".join(inputs)
        output = broadcast_letters + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c.islower()))
    for term, rank in zip(inputs, ranks, strict=True):
        if len(term) != rank:
            raise ValueError(f"einsum term {term!r} has {len(term)} letters for an operand with {rank} dimensions")
    if any(letter not in "".join(inputs) for letter in output):
        raise ValueError(f"einsum output {output!r} names a letter no input has")
    return EinsumSpec(tuple(inputs), output)


def _expand_ellipsis(term: str, rank: int, broadcast_letters: str) -> str:
    if "..." not in term:
        return term
    count = rank - len(term.replace("...", ""))
    return term.replace("...", broadcast_letters[len(broadcast_letters) - count :])


def _diagonal_of_repeated_letters(tensor: Tensor, term: str) -> tuple[Tensor, str]:
    """'ii' takes the diagonal: keep one axis per letter, multiplying by an identity mask for the repeats."""
    while len(set(term)) != len(term):
        letter = next(c for c in term if term.count(c) > 1)
        first, second = term.index(letter), term.index(letter, term.index(letter) + 1)
        size = tensor.shape[first]
        eye = type(tensor).eye(size, dtype=tensor.dtype, device=tensor.device)
        eye_shape = [1] * tensor.ndim
        eye_shape[first], eye_shape[second] = size, size
        tensor = (tensor * eye.reshape(eye_shape)).sum(second)
        term = term[:second] + term[second + 1 :]
    return tensor, term


def einsum(formula: str, *operands: Tensor, dtype: DType | None = None) -> Tensor:
    """Sum of products over the letters missing from the output: every operand is permuted to one shared axis
    order (all letters), broadcast, multiplied, then summed over the contracted letters."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    spec = parse_einsum(formula, tuple(operand.ndim for operand in operands))
    prepared = [_diagonal_of_repeated_letters(t, term) for t, term in zip(operands, spec.inputs, strict=True)]
    letters = spec.output + "".join(sorted({c for _, term in prepared for c in term} - set(spec.output)))
    sizes: dict[str, int] = {}
    aligned = []
    for tensor, term in prepared:
        for letter, size in zip(term, tensor.shape, strict=True):
            if sizes.setdefault(letter, size) != size and size != 1 and sizes[letter] != 1:
                raise ShapeError(f"einsum letter {letter!r} has sizes {sizes[letter]} and {size}")
            sizes[letter] = max(sizes[letter], size)
        order = sorted(range(len(term)), key=lambda axis: letters.index(term[axis]))
        permuted = tensor.permute(order) if order else tensor
        shape = [tensor.shape[term.index(c)] if c in term else 1 for c in letters]
        aligned.append(permuted.reshape(shape))
    product = aligned[0]
    for tensor in aligned[1:]:
        product = product * tensor
    product = product.expand(tuple(sizes[c] for c in letters))
    contracted = tuple(range(len(spec.output), len(letters)))
    result_dtype = product.dtype if dtype is None else dtype
    if not contracted:
        return product.cast(result_dtype)
    return product.sum(contracted, dtype=sum_accumulator(result_dtype)).cast(result_dtype)


class LinalgOps:
    """`matmul, @, dot, linear, einsum`."""

    def matmul(self, other: Tensor, reverse: bool = False, dtype: DType | str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        if not hasattr(other, "uop"):
            other = type(self)(other, device=self.device)
        return matmul(other, self, dtype) if reverse else matmul(self, other, dtype)

    def dot(self, other: Tensor, dtype: DType | str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return self.matmul(other, dtype=dtype)

    def __matmul__(self, other: Tensor) -> Tensor:
        return self.matmul(other)

    def __rmatmul__(self, other: Tensor) -> Tensor:
        return self.matmul(other, reverse=True)

    def linear(self, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
        """`self @ weight + bias`, with `weight` of shape (in, out) as tinygrad (a 1-d weight scales elementwise);
        `dtype` is the matmul's accumulation and result dtype."""
        dtype = dtype_argument(dtype)
        if dtype is not None and weight.ndim == 1:
            return self.cast(dtype).linear(weight.cast(dtype), None if bias is None else bias.cast(dtype))
        result = self * weight if weight.ndim == 1 else self.matmul(weight, dtype=dtype)
        return result if bias is None else result + bias

    @staticmethod
    def einsum(formula: str, *operands: Tensor, dtype: DType | str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        return einsum(formula, *operands, dtype=dtype)
