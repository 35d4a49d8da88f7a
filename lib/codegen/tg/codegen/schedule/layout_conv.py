"""Layout policy for conv2d's weight gradient: its pixels reduced in chunks that fit the cache (a schedule stage).

The front end (tg.tensor.conv_backward) builds the weight gradient as one reduction over every pixel:
dW[g, ci, k, co] = sum over (n, pixel) of windows[n, ci, pixel, k] * g[n, pixel, co], both operands viewed as
(chunks of images, chunks of rows, G, C_in / G, *kernel, images, rows, *out[1:], C_out / G) with one chunk of
each, and tags the sum (`WeightGradientTag`). One sweep over all pixels rereads the whole input for every tile of the
output, so on a machine whose L2 holds less than a quarter of the operands this stage cuts the pixels into chunks of
output rows (or whole images) that do fit, each chunk reduced to a partial result, then the partials summed: the
graph the front end used to build itself from the host's L2 size.
"""

from __future__ import annotations

from dataclasses import dataclass

from tg.codegen.schedule.graph import shape_of
from tg.codegen.schedule.layout import cast_chain, expand, permute, reshape, skip_detach, strip_casts
from tg.codegen.target import Target
from tg.codegen.uop.args import ReduceArg
from tg.codegen.uop.ops import Ops, UOp


@dataclass(frozen=True)
class WeightGradientTag:
    """Tags the weight gradient's sum over pixels (one chunk). What choosing chunks needs, all from shapes:
    `row_bytes`: the bytes of windows and gradient one output row of one image reads; `limit`: the most elements
    the partial results may hold (the larger operand's); `weight_size`: elements of one partial result."""

    batch: int
    out_rows: int
    row_bytes: int
    limit: int
    weight_size: int
    spatial: int


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class PixelChunks:
    """How the weight gradient's pixels are split into chunks, each reduced to a partial result: `images` whole
    images per chunk, or `rows` rows of the first output axis of one image (one of them is 1 or whole)."""

    batch: int
    out_rows: int
    images: int
    rows: int

    @property
    def batch_chunks(self) -> int:
        return self.batch // self.images

    @property
    def row_chunks(self) -> int:
        return self.out_rows // self.rows

    @property
    def partials(self) -> int:
        return self.batch_chunks * self.row_chunks


def choose_chunks(batch: int, out_rows: int, row_bytes: int, budget: int, weight_size: int, limit: int) -> PixelChunks:
    """The largest chunk whose window rows and gradient rows take at most `budget` bytes (one row when even one does
    not fit), grown further while its partial results (`weight_size` each) would hold more than `limit` elements.
    The whole batch in one chunk is a single reduction, without partials."""
    shapes = [(1, rows) for rows in divisors(out_rows)] + [(k, out_rows) for k in divisors(batch) if k > 1]
    fitting = [shape for shape in shapes if shape[0] * shape[1] * row_bytes <= budget]
    start = shapes.index(fitting[-1]) if fitting else 0
    candidates = (PixelChunks(batch, out_rows, images, rows) for images, rows in shapes[start:])
    return next(c for c in candidates if c.partials == 1 or c.partials * weight_size <= limit)


def chunks_for(tag: WeightGradientTag, target: Target) -> PixelChunks:
    """Chunks that sit in a quarter of the Target's L2, their partial results no larger than the operands."""
    return choose_chunks(tag.batch, tag.out_rows, tag.row_bytes, target.l2_bytes // 4, tag.weight_size, tag.limit)


def window_rows(patches: UOp, groups: int, spatial: int, chunks: PixelChunks) -> UOp:
    """The windows (N, C_in, *out, *kernel) as (batch chunks, row chunks, G, C_in / G, *kernel, images, rows,
    *out[1:], 1): the left operand, one window value per output row of the weight gradient."""
    shape = shape_of(patches)
    channels_in, kernel = shape[1], shape[2 + spatial :]
    split = (chunks.batch_chunks, chunks.images, groups, channels_in // groups, chunks.row_chunks, chunks.rows)
    patches = reshape(patches, split + shape[3 : 2 + spatial] + kernel)
    kernel_axes = tuple(range(5 + spatial, 5 + 2 * spatial))
    patches = permute(patches, (0, 4, 2, 3) + kernel_axes + (1,) + tuple(range(5, 5 + spatial)))
    return reshape(patches, shape_of(patches) + (1,))


def gradient_columns(channels_last: UOp, spatial: int, chunks: PixelChunks) -> UOp:
    """The output gradient copied channels-last, (N, G, *out, C_out / G), viewed as (batch chunks, row chunks, G,
    1, *(1,) * spatial, images, rows, *out[1:], C_out / G): the right operand, C_out / G contiguous."""
    shape = shape_of(channels_last)
    groups, out, per_group = shape[1], shape[2 : 2 + spatial], shape[-1]
    split = (chunks.batch_chunks, chunks.images, groups, chunks.row_chunks, chunks.rows)
    columns = reshape(channels_last, split + out[1:] + (per_group,))
    columns = permute(columns, (0, 3, 2, 1) + tuple(range(4, 5 + spatial)))
    inner = (chunks.images, chunks.rows) + out[1:]
    return reshape(columns, (chunks.batch_chunks, chunks.row_chunks, groups, 1) + (1,) * spatial + inner + (per_group,))


def _operand(view: UOp) -> tuple[UOp, tuple]:
    """The node a one-chunk operand view (RESHAPE(PERMUTE(RESHAPE(x)))) was made from, and the casts above it."""
    node, casts = strip_casts(view)
    node = skip_detach(node)
    node = skip_detach(node.src[0]) if node.op is Ops.EXPAND else node
    for op in (Ops.RESHAPE, Ops.PERMUTE, Ops.RESHAPE):
        if node.op is not op:
            raise ValueError(f"a tagged weight gradient whose operand is not a chunk view: {node.op!r}")
        node = skip_detach(node.src[0])
    return node, casts


def chunked_weight_gradient(total: UOp, tag: WeightGradientTag, target: Target) -> UOp:
    """The weight gradient's pixel sum `total` (one chunk, untagged) reduced in the Target's chunks: as it is when
    one chunk fits, else a sum of partial results per chunk, summed over the chunks."""
    chunks = chunks_for(tag, target)
    if chunks.partials == 1:
        return total
    reduction = skip_detach(skip_detach(total).src[0])
    multiply = skip_detach(reduction.src[0])
    patches, row_casts = _operand(multiply.src[0])
    channels_last, column_casts = _operand(multiply.src[1])
    groups = shape_of(channels_last)[1]
    assert isinstance(groups, int)  # a weight gradient is only tagged for concrete shapes
    rows = window_rows(patches, groups, tag.spatial, chunks)
    columns = gradient_columns(channels_last, tag.spatial, chunks)
    common = tuple(max(a, b) for a, b in zip(shape_of(rows), shape_of(columns), strict=True))
    rows, columns = cast_chain(expand(rows, common), row_casts), cast_chain(expand(columns, common), column_casts)
    product = UOp(Ops.MUL, multiply.dtype, (rows, columns))
    pixel_axes = tuple(range(4 + tag.spatial, 5 + 2 * tag.spatial))  # images, rows, *out[1:]
    partials = _sum(product, pixel_axes)  # (chunks, chunks, G, C_in / G, *kernel, C_out / G)
    return _sum(partials, (0, 1))


def _sum(node: UOp, axes: tuple[int, ...]) -> UOp:
    """A float sum over `axes` in the node's own dtype, the axes dropped (Tensor.sum of an accumulator dtype)."""
    reduced = UOp(Ops.REDUCE_AXIS, node.dtype, (node,), ReduceArg(Ops.ADD, axes))
    return reshape(reduced, tuple(size for axis, size in enumerate(shape_of(node)) if axis not in axes))


__all__ = ["PixelChunks", "WeightGradientTag", "choose_chunks", "chunked_weight_gradient", "chunks_for"]
