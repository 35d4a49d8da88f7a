"""Linear algebra: `matmul` (`@`), `dot`, `linear` and `einsum`, built from movement ops, a multiply and a sum.

A matrix product is a broadcast multiply followed by a sum over the shared axis: `(..., n, 1, k) * (..., 1, m, k)`
summed over `k`. The scheduler fuses the multiply into the reduction, so no `n*m*k` buffer is ever stored; the
kernel optimizer is what makes that loop fast. Sums accumulate as `Tensor.sum` does (16-bit floats in float32,
small ints in int32) and the result is cast back to the operands' promoted dtype, as torch does.

The graph is the same on every machine. The product's result is tagged (`MatmulTag`), and the scheduler's layout
stage (tg.codegen.schedule.layout) lays its operands out for the device's Target: on the CPU a right operand whose
column strips alias in the cache is first packed strip by strip (a GPT-2 MLP's 768x3072 and 3072x768 weights ran at a
third of the speed of the 768x2304 one, issue 23), the packed copy of a realized weight kept by the engine until the
weight is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.codegen import DType
from tg.codegen.schedule.graph import ShapeError
from tg.codegen.schedule.layout import MatmulTag
from tg.codegen.uop.args import ReduceArg
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.tensor.autograd import Gradients, custom_gradient
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.elementwise import broadcast
from tg.tensor.promotion import broadcast_shapes, dtype_argument
from tg.tensor.reduce import sum_accumulator
from tg.tensor.symbolic import concrete_size

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _multiply_and_sum(a: Tensor, b: Tensor, axes: tuple[int, ...], dtype: DType | None) -> Tensor:
    """sum(a * b) over `axes` (a and b broadcast), accumulated widely and returned in the promoted dtype."""
    a, b = broadcast(a, b)
    result_dtype = a.dtype if dtype is None else dtype
    accumulator = sum_accumulator(result_dtype)
    return (a.cast(accumulator) * b.cast(accumulator)).sum(axes).cast(result_dtype)


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
    """A constant broadcast to a shape (the gradient of a sum): all its rows and columns are the same. Not a padded
    one: PAD fills with zeros, so `eye` (ones padded into a diagonal) has rows that differ."""
    while node.op in GroupOp.Movement and node.op is not Ops.PAD:
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
        d_left: UOp | None = None
        d_right: UOp | None = None
        if wanted[0]:
            right_t = tensor_type(right_node, device=device).transpose(-1, -2)
            d_left = sum_to_shape(gradient_product(g, right_t), left_shape).cast(left_node.dtype).uop
        if wanted[1]:
            left = tensor_type(left_node, device=device)
            if len(right_shape) == 2:  # a weight shared by every matrix of the batch: one product over all rows
                left, g = rows_of(left), rows_of(g)
            d_right = sum_to_shape(gradient_product(left.transpose(-1, -2), g), right_shape).cast(right_node.dtype).uop
        return (d_left, d_right)

    custom_gradient(result.uop, (left_node, right_node), rule)


def _plain_product(left: Tensor, right: Tensor, dtype: DType | None) -> UOp | None:
    """The nodes of `left @ right` (left (..., n, k), right (k, m) or (..., k, m) with the same leading axes) built
    directly: the same nodes the general path makes through reshape, expand, transpose, a multiply and a sum, without
    their per-op argument handling, shape checks and view bookkeeping (about 100 us of Python per product, 6 products
    in a GPT-2 block). None when the general path is needed: leading axes that broadcast, a symbolic size, a cast on
    the way (two dtypes, a wider accumulator), two devices, or no_grad (where every step of the general path adds its
    own DETACH)."""
    element = left.dtype
    if element is not right.dtype or dtype not in (None, element) or type(left).no_grad:
        return None
    if sum_accumulator(element) is not element or left.device != right.device:
        return None
    shape, right_shape = left.shape, right.shape
    batch, right_batch = shape[:-2], right_shape[:-2]
    if (right_batch and right_batch != batch) or not all(type(size) is int for size in (*shape, *right_shape)):
        return None
    n, k, m = shape[-2], shape[-1], right_shape[-1]
    product_shape = batch + (n, m, k)
    rows = UOp(Ops.RESHAPE, element, (left.uop,), batch + (n, 1, k))
    if m != 1:
        rows = UOp(Ops.EXPAND, element, (rows,), product_shape)
    transposed = tuple(range(len(right_batch))) + (len(right_batch) + 1, len(right_batch))
    columns = UOp(Ops.RESHAPE, element, (UOp(Ops.PERMUTE, element, (right.uop,), transposed),), right_batch + (1, m, k))
    columns_shape = (1,) * len(batch) + (1, m, k) if not right_batch else right_batch + (1, m, k)
    if batch and not right_batch:  # expand adds the leading axes as size 1 first
        columns = UOp(Ops.RESHAPE, element, (columns,), columns_shape)
    if columns_shape != product_shape:
        columns = UOp(Ops.EXPAND, element, (columns,), product_shape)
    products = UOp(Ops.MUL, element, (rows, columns))
    summed = UOp(Ops.REDUCE_AXIS, element, (products,), ReduceArg(Ops.ADD, (len(shape),)))
    return UOp(Ops.RESHAPE, element, (summed,), batch + (n, m))


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
    n, k, m = left.shape[-2], left.shape[-1], right.shape[-1]
    tag = MatmulTag(right_trained=bool(right.requires_grad), left_trained=bool(left.requires_grad))
    plain = _plain_product(left, right, dtype)
    if plain is not None:
        result = left._wrap(plain.replace(tag=tag))
    else:
        batch = broadcast_shapes(left.shape[:-2], right.shape[:-2])
        rows = left.reshape(left.shape[:-1] + (1, k)).expand(batch + (n, m, k))
        columns = right.transpose(-1, -2).reshape(right.shape[:-2] + (1, m, k)).expand(batch + (n, m, k))
        result = _multiply_and_sum(rows, columns, (len(batch) + 2,), dtype)
        result.uop = result.uop.replace(tag=tag)  # for the layout stage
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
        size = concrete_size(tensor.shape[first], "einsum's repeated letter")
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
    sizes: dict[str, int | UOp] = {}
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


class LinalgOps(TensorBase):
    """`matmul, @, dot, linear, einsum`."""

    def matmul(self, other: Tensor, reverse: bool = False, dtype: DType | str | None = None) -> Tensor:
        dtype = dtype_argument(dtype)
        if not hasattr(other, "uop"):
            other = type(as_tensor(self))(other, device=self.device)
        return matmul(other, as_tensor(self), dtype) if reverse else matmul(as_tensor(self), other, dtype)

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
