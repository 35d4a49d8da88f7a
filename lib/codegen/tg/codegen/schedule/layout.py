"""Layout policy: the schedule stage that lays out a product's operands for the machine it runs on.

The Tensor front end builds the same semantic graph on every machine: a matrix product is a broadcast multiply
summed over the shared axis, and conv2d's weight gradient one reduction over all its pixels; it marks such nodes
with a tag saying what they compute (`MatmulTag`, `WeightGradientTag`). This stage, the first the scheduler runs,
reads the device's Target (tg.codegen.target) and rewrites each marked node into the layout that is fast there,
then drops the tags, so the same program gives the same tensor graph (and graph key) on every machine, and only
kernels depend on the machine:

- matmul operand packing (CPU): a right operand whose column strips alias in the cache (a GPT-2 MLP's 768x3072
  weight ran at a third of the 768x2304 one's speed, issue 23), a transposed view, or a realized weight that is not
  trained (for any number of rows, a decode step's one included) is first copied strip by strip,
  (..., m / STRIP, k, STRIP); a packed realized weight is a kept copy (KEPT_COPY) the engine reuses until the weight
  is written. So is a view whose rows lie a page or more apart in longer rows of memory (attention's values, a
  slice of the qkv projection) when enough rows read it, and an operand, computed or not, whose strip would fit
  the L1 cache packed but aliases there as it lies (a weight gradient's output gradient over 128 tokens). Where
  the right operand is packed, a left operand whose rows alias in L1 (k a multiple of 1024 float32) or that is
  cast is copied into row tiles too, (..., n / STRIP, k, STRIP), kept the same way when it is a realized matrix
  (issue 38: 4096^3 ran at half of numpy's speed without). The copies hold the values the multiply reads (float16
  operands as float32). A left operand whose rows are scattered (attention's output viewed as (tokens, heads * 64))
  is copied contiguous first, when it is in memory or stored anyway (the copy is then the kernel that stores it).
  A computed left operand whose rows alias in L1, that gets a kernel of its own anyway and that too few columns
  reuse to pay for row tiles (GPT-2's gelu before its 3072x768 projection) is stored with rows STRIP elements
  longer instead. A packed right operand that is a prefix of another one packed in the same graph (a causal
  attention's query blocks read the first 256, 512, ... keys and values) reads the start of that one's copy.
- conv2d weight-gradient chunking (CPU): the pixels are reduced in chunks whose operands fit a quarter of L2, each
  chunk a partial result, then the partials summed (tg.codegen.schedule.layout_conv).

Each rewrite rebuilds the graph the front end used to build for that machine, node for node, so kernels do not
change: movement helpers here elide no-op movements exactly as Tensor's do.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

from tg.codegen.dtype import DType
from tg.codegen.schedule import indexing
from tg.codegen.schedule.graph import KEPT_COPY, device_of, shape_of
from tg.codegen.schedule.realize import elementwise_cost, fuse_into_reduction, reads_memory
from tg.codegen.target import Target
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import GroupOp, Ops, UOp
from tg.codegen.uop.pattern import graph_rewrite

TargetOf = Callable[[str], Target]  # the Target of a device, by canonical name
# the packed copy of each right operand the stage packed, by (operand, its casts): see prefix_packs
RightPacks = dict[tuple[UOp, tuple[DType, ...]], UOp]

STRIP = 16  # the kernel heuristics' contiguous upcast: one strip row is one 64-byte cache line of float32
MIN_PACKED_ROWS = 32  # the kernel sweeps a strip once per 8 rows of the left operand: 4 sweeps pay for the copy
MIN_PACKED_ELEMENTS = 1 << 16  # a smaller operand (256 KiB of float32) is cheap to read in any layout
# a copy of the left operand costs about as much as 1024 columns of the product gain from it (1024^3: the copy
# 1.2 ms at ~7 GB/s, the product 10% faster, ~1 ms of ~10 ms); a realized operand's copy is kept (free after the first)
LEFT_PACK_MIN_COLUMNS = 1024
L1_WAY_BYTES = 4096  # an L1 cache indexed by virtual address has ways of one page (x86 and arm64 cores alike)
# a right operand whose rows lie on separate pages (`rows_on_separate_pages`) is copied into strips from this many rows
# of the left one: GPT-2's attention values (128 and 1,024 tokens) gained from it; fewer rows were not measured
PAGED_ROWS_MIN_ROWS = 128


@dataclass(frozen=True)
class MatmulTag:
    """Tags the result of `left @ right` as the front end builds it (before any cast back to the result dtype:
    the node `sum(rows * columns)` reshaped to (..., n, m), or that cast). `right_trained`: the right operand
    requires grad, so a packed copy of it would change at every step."""

    right_trained: bool
    left_trained: bool = False


def default_target(device: str) -> Target:
    """The Target of a machine nobody described: no layout policy applies."""
    return Target()


# ---------------------------------------------------------------------------------------------------- movements


def reshape(node: UOp, shape: tuple) -> UOp:
    return node if shape_of(node) == tuple(shape) else UOp(Ops.RESHAPE, node.dtype, (node,), tuple(shape))


def permute(node: UOp, order: tuple[int, ...]) -> UOp:
    return node if tuple(order) == tuple(range(len(order))) else UOp(Ops.PERMUTE, node.dtype, (node,), tuple(order))


def expand(node: UOp, shape: tuple) -> UOp:
    """Tensor.expand: new leading axes are added by a reshape first."""
    node = reshape(node, (1,) * (len(shape) - len(shape_of(node))) + shape_of(node))
    return node if shape_of(node) == tuple(shape) else UOp(Ops.EXPAND, node.dtype, (node,), tuple(shape))


def cast_chain(node: UOp, dtypes_: tuple[DType, ...]) -> UOp:
    for dtype in dtypes_:
        node = UOp(Ops.CAST, dtype, (node,))
    return node


def skip_detach(node: UOp) -> UOp:
    """`node` without the DETACHes that building under `Tensor.no_grad` puts above computed nodes."""
    while node.op is Ops.DETACH:
        node = node.src[0]
    return node


def strip_casts(node: UOp) -> tuple[UOp, tuple[DType, ...]]:
    """The node under a chain of CASTs, and the chain's dtypes from the inside out."""
    chain: list[DType] = []
    node = skip_detach(node)
    while node.op is Ops.CAST:
        chain.append(node.dtype)
        node = skip_detach(node.src[0])
    return node, tuple(reversed(chain))


# ---------------------------------------------------------------------------------------------------- predicates


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


def memory_stride(view: UOp, axis: int) -> int | None:
    """How many elements apart neighbours along `axis` of `view` lie in the memory under its movement ops (a view of
    a buffer, or of a reduction's output: `in_memory`); None where that is not one constant (a pad, a flip, a
    symbolic size, a broadcast)."""
    shape = shape_of(view)
    if not concrete(shape):
        return None
    positions = []
    for step in (0, 1):
        idx = tuple(indexing.index_const(step if a == axis else 0) for a in range(len(shape)))
        node = view
        while node.op in GroupOp.Movement:
            if node.op is Ops.RESHAPE:
                idx = indexing.reshape_index(idx, shape_of(node), shape_of(node.src[0]))
            elif node.op is Ops.PERMUTE:
                idx = indexing.permute_index(idx, node.arg)
            elif node.op is Ops.SHRINK:
                idx = indexing.shrink_index(idx, node.arg)
            else:
                return None
            node = node.src[0]
        flat = graph_rewrite(indexing.flat_index(idx, shape_of(node)), simplify_indices)
        if flat.op is not Ops.CONST:
            return None
        positions.append(flat.arg)
    return positions[1] - positions[0]


def rows_on_separate_pages(right: UOp) -> bool:
    """Whether the k rows of a right operand (..., k, m) are pieces of longer rows of memory, a page
    (L1_WAY_BYTES) or more apart: attention's values, a slice of the qkv projection (rows of 64 of 2,304 floats,
    9 KiB apart). A matmul tile sweeps a strip of it as k lines each on a new page, which the prefetcher does not
    follow. A matrix whose rows follow one another (a weight) is not such a view: `strips_alias_in_cache` decides.
    GPT-2's probabilities @ values, kernel time, best of 5, load 8-9, gcc 12, 2 AVX-512 cores: 1,024 tokens 44-57 ->
    11-27 ms plus a 0.5-0.65 ms copy; 128 tokens 0.41 -> 0.28-0.34 ms plus a 0.08 ms copy."""
    shape = shape_of(right)
    stride = memory_stride(right, len(shape) - 2)
    if stride is None or stride == shape[-1]:
        return False
    return abs(stride) * right.dtype.itemsize >= L1_WAY_BYTES


def strips_alias_in_cache(k: int, row_bytes: int, l2_bytes: int) -> bool:
    """Whether a column strip of a row-major (k, m) operand misses the cache. The matmul kernel sweeps one strip
    (k lines, `row_bytes` apart) once per block of rows of the left operand, counting on it staying in L2. A cache
    picks a line's set from the low address bits, so lines a multiple of a power of two P apart use only
    1/(P/64) of the sets: at most L2/P of them fit. 768 rows 12 KiB apart (a 768x3072 weight) need more."""
    period = row_bytes & -row_bytes  # the largest power of two dividing the row size
    return k > l2_bytes // period


def strips_alias_in_l1(k: int, row_bytes: int, l1_bytes: int) -> bool:
    """Whether a column strip of a row-major (k, m) operand that would fit half the L1 cache once packed (k lines of
    64 bytes) misses it as it lies: its lines `row_bytes` apart use only the sets a period of the largest power of
    two dividing `row_bytes` (at most a way, L1_WAY_BYTES) leaves them, so at most l1_bytes / period of them stay.
    A weight gradient's output gradient over 128 tokens (128 rows 12 KiB apart, 3,072 columns): 12 of its 128 lines
    stay, and every tile of rows reads the strip from L2 again where a packed 8 KiB strip stays in L1."""
    period = min(row_bytes & -row_bytes, L1_WAY_BYTES)
    return k * STRIP * 4 <= l1_bytes // 2 and k > l1_bytes // period


def scattered_rows(node: UOp) -> bool:
    """A view whose rows are pieces from several places: its last axis merges axes that a PERMUTE took out of
    memory order (attention's output, (heads, tokens, 64) transposed to (tokens, heads, 64) and reshaped to
    (tokens, 768): each row is 12 runs of 64, 32 KiB apart)."""
    if node.op is not Ops.RESHAPE or node.src[0].op is not Ops.PERMUTE:
        return False
    order, source_shape = node.src[0].arg, shape_of(node.src[0])
    merged, size = 0, 1  # only called on concrete shapes (wants_contiguous_rows checks)
    while merged < len(source_shape) and size < shape_of(node)[-1]:
        merged += 1
        size = size * cast(int, source_shape[-merged])
    return tuple(order[-merged:]) != tuple(range(len(order) - merged, len(order)))


def concrete(shape: tuple) -> bool:
    return all(isinstance(size, int) for size in shape)


# ---------------------------------------------------------------------------------------------------- matmul


@dataclass(frozen=True)
class Product:
    """A tagged product taken apart: `left` (..., n, k) and `right` (..., k, m) as the front end received them, the
    cast chains of each side of the multiply, the multiply and the reduction, and the cast to the result dtype."""

    left: UOp
    right: UOp
    left_casts: tuple[DType, ...]
    right_casts: tuple[DType, ...]
    multiply: UOp
    reduction: UOp
    result_casts: tuple[DType, ...]
    batch: tuple


def take_apart(top: UOp) -> Product | None:
    """The parts of a product built as `sum(rows * columns)` (tg.tensor.linalg.matmul); None for another shape."""
    summed, result_casts = strip_casts(top)
    if summed.op is not Ops.RESHAPE or skip_detach(summed.src[0]).op is not Ops.REDUCE_AXIS:
        return None
    reduction = skip_detach(summed.src[0])
    multiply = skip_detach(reduction.src[0])
    if multiply.op is not Ops.MUL:
        return None
    rows, left_casts = strip_casts(multiply.src[0])
    columns, right_casts = strip_casts(multiply.src[1])
    rows, columns = skip_detach(rows), skip_detach(columns)
    rows = skip_detach(rows.src[0]) if rows.op is Ops.EXPAND else rows
    columns = skip_detach(columns.src[0]) if columns.op is Ops.EXPAND else columns
    if rows.op is Ops.RESHAPE and not _adds_row_axis(rows):  # the reshape an expand adds leading axes with
        rows = skip_detach(rows.src[0])
    while columns.op is Ops.RESHAPE:  # right^T reshaped to (..., 1, m, k), maybe given leading axes by the expand
        columns = skip_detach(columns.src[0])
    if rows.op is not Ops.RESHAPE or not _adds_row_axis(rows) or columns.op is not Ops.PERMUTE:
        return None
    left, right = rows.src[0], columns.src[0]
    batch = shape_of(summed)[:-2]
    return Product(left, right, left_casts, right_casts, multiply, reduction, result_casts, batch)


def _adds_row_axis(node: UOp) -> bool:
    """Whether RESHAPE `node` is left (..., n, k) viewed as (..., n, 1, k), the rows of a product."""
    shape, source = shape_of(node), shape_of(node.src[0])
    return len(shape) >= 2 and shape[-2] == 1 and source == shape[:-2] + shape[-1:]


def worth_packing(product: Product, trained: bool, target: Target) -> bool:
    """Pack the right operand on a CPU when it is in memory already (packing a computed one, say a dequantized
    weight, would store what the matmul otherwise computes on the fly), read by enough rows of the left one that each
    strip is swept several times, and either a realized weight that is not being trained (its packed copy is kept:
    only the first product after a write copies), a transposed view, a view whose rows lie on separate pages
    (`rows_on_separate_pages`, from PAGED_ROWS_MIN_ROWS rows of the left operand) or a row-major matrix whose strips
    alias in the cache. One whose strips alias in L1 but would fit it packed (`strips_alias_in_l1`) is packed even
    when computed: the copy computes it once, where each tile of rows would compute its strip again. The packed
    product is faster even where strips do not alias: GPT-2's 768x2304 and 768x768 weights (128 rows) 5.5 -> 3.7 ms
    and 0.95 -> 0.90 ms, best of 15 at load 6; but a weight that requires grad changes at every step, and a copy per
    product made the first a wash and the second 1.7 ms."""
    left_shape, right_shape = shape_of(product.left), shape_of(product.right)
    if target.family != "CPU" or not concrete(left_shape + right_shape):
        return False  # a symbolic size: whether strips fit is not known when the kernel is built
    k, m = right_shape[-2], right_shape[-1]
    assert isinstance(k, int) and isinstance(m, int)  # (concrete)
    if m % STRIP or math.prod(right_shape) < MIN_PACKED_ELEMENTS:
        return False
    few_rows = left_shape[-2] < MIN_PACKED_ROWS
    row_bytes = (memory_stride(product.right, len(right_shape) - 2) or m) * product.right.dtype.itemsize
    if not few_rows and strips_alias_in_l1(k, row_bytes, target.l1_bytes):
        return True
    if not in_memory(product.right):
        return False
    if realized_matrix(product.right) and not trained and not (few_rows and product.right_casts):
        # kept, so copied once, whatever the rows: a 1 or 8 row product then reads each strip as one run of k * 64
        # bytes instead of k lines a row apart (a new page each, which the prefetcher does not follow).
        # 1x768x3072 2.9 -> 1.2 ms and 8x768x3072 3.4 -> 1.6 ms (kernel time, median of 15, load 4.4). Not a cast
        # weight's (a float16 one, its copy float32): a decode step would read twice the bytes it reads now.
        return True
    if few_rows:
        return False
    if transposed_view(product.right):
        return True
    if left_shape[-2] >= PAGED_ROWS_MIN_ROWS and rows_on_separate_pages(product.right):
        return True
    return len(right_shape) == 2 and strips_alias_in_cache(k, m * product.right.dtype.itemsize, target.l2_bytes)


def wants_contiguous_rows(product: Product, target: Target) -> bool:
    """The left operand is copied first when its rows are scattered (`scattered_rows`), enough rows read it, and it
    is in memory or stored anyway (`stored_anyway`): GPT-2's attention output @ its 768x768 projection 2.0 -> 0.93 ms
    with the copy (best of 9, load 4.3). The copy of a stored value is the kernel that stores it, writing its rows
    in order: long causal attention's query blocks concatenated (tg.tensor.attention), stored as (heads, tokens,
    64) and read scattered, took the 1024-token projection from 4.2 to 9-10 ms."""
    shape = shape_of(product.left)
    if target.family != "CPU" or not concrete(shape) or shape[-2] < MIN_PACKED_ROWS:
        return False
    if not scattered_rows(product.left):
        return False
    columns = shape_of(product.right)[-1]
    return in_memory(product.left) or (isinstance(columns, int) and stored_anyway(product.left, columns))


def stored_anyway(view: UOp, columns: int) -> bool:
    """Whether the elementwise value under `view` gets a buffer whatever its layout: the realize stage's
    `fuse_into_reduction` says recomputing it for each of a product's `columns` costs more than a round trip."""
    value = value_under(view)
    return value.op in GroupOp.ALU and not fuse_into_reduction(columns, elementwise_cost(value, set()))


def value_under(view: UOp) -> UOp:
    """The node under `view`'s movement ops."""
    while view.op in GroupOp.Movement:
        view = view.src[0]
    return view


def rows_alias_in_l1(row_bytes: int, l1_bytes: int) -> bool:
    """Whether the STRIP rows of a matmul tile, `row_bytes` apart, fall into too few sets of the L1 cache to stay
    there. An L1 cache indexed by virtual address has ways of one 4 KiB page (L1_WAY_BYTES) and l1_bytes /
    L1_WAY_BYTES of them; lines a multiple of a power of two P apart use L1_WAY_BYTES / P of its sets. The tile reads
    one line of each of its rows per step, and one line of the packed right operand: k = 1024 float32 puts all 16
    rows in one set of 12 ways (a 48 KiB L1), k = 512 8 in each of two."""
    period = min(row_bytes & -row_bytes, L1_WAY_BYTES)  # the largest power of two dividing the row size
    sets = L1_WAY_BYTES // period
    return -(-STRIP // sets) >= l1_bytes // L1_WAY_BYTES


def worth_packing_rows(product: Product, target: Target) -> bool:
    """Copy the left operand into row tiles too (`row_tiles`, only where the right one is packed) when its rows
    alias in L1 (`rows_alias_in_l1`) or it is cast (float16 operands: the copy holds float32 values, which the
    kernel broadcasts without converting), and at least LEFT_PACK_MIN_COLUMNS columns of output reuse it. The
    product's kernel with both operands packed, against the right one only (median of 3-9, interleaved, load 2.2-2.5,
    gcc 12, 2 AVX-512 cores): 4096^3 982 -> 515 ms, 2048^3 56.3 -> 51.1 ms, 1024^3 10.7 -> 9.7 ms."""
    left_shape, m = shape_of(product.left), shape_of(product.right)[-1]
    n, k = left_shape[-2], left_shape[-1]
    assert isinstance(n, int) and isinstance(k, int) and isinstance(m, int)  # (worth_packing: concrete shapes)
    if target.family != "CPU" or n % STRIP or m < LEFT_PACK_MIN_COLUMNS or not in_memory(product.left):
        return False
    return bool(product.left_casts) or rows_alias_in_l1(k * product.left.dtype.itemsize, target.l1_bytes)


def wants_padded_rows(product: Product, target: Target, read_once: Callable[[UOp], bool]) -> bool:
    """A computed left operand that gets a kernel of its own anyway (the realize stage's `fuse_into_reduction` says
    recomputing it for each of the m columns costs more than storing it: GPT-2's gelu before its 3072x768
    projection, not attention's probabilities before the 64 columns of a head's values), whose rows alias in L1
    and that is not copied into row tiles (fewer than LEFT_PACK_MIN_COLUMNS columns reuse it): that kernel stores it
    with rows STRIP elements longer (`padded_rows`), at next to no cost. Only a value this product alone reads
    (`read_once`): in a training step the weight gradient's product reads it too, and would need a second kernel.
    The 3072x768 projection over 128 tokens, realized rows 3072 against 3088 floats long (what the padding gives),
    gcc 12, 2 AVX-512 cores, medians of 7 interleaved calls: 14.4 -> 10.4 ms; over 1,024 tokens 61.3 -> 55.6 ms."""
    shape, m = shape_of(product.left), shape_of(product.right)[-1]
    if target.family != "CPU" or not concrete(shape) or shape[-2] < MIN_PACKED_ROWS or in_memory(product.left):
        return False
    assert isinstance(shape[-1], int) and isinstance(m, int)  # (concrete shapes: worth_packing checked the right's)
    value = value_under(product.left)
    if not stored_anyway(product.left, m) or not read_once(value):
        return False
    if broadcasts_a_reduction(value):
        return False  # a softmax's rows (its max and sum broadcast): the realize stage fuses them into the product
    return rows_alias_in_l1(shape[-1] * product.left.dtype.itemsize, target.l1_bytes)


def broadcasts_a_reduction(value: UOp) -> bool:
    """Whether elementwise `value` computes a reduction and reads its result through an EXPAND (a softmax's max and
    sum). One walk down to the memory `value` reads, noting whether it went through an EXPAND on the way: a
    reduction behind memory is another kernel's, and a reduction met before any EXPAND is `value`'s own."""
    stack, seen = [(value, False)], set()
    while stack:
        node, expanded = stack.pop()
        if (node, expanded) in seen or reads_memory(node):
            continue
        seen.add((node, expanded))
        if node.op is Ops.REDUCE_AXIS:
            if expanded:
                return True
            continue
        stack.extend((source, expanded or node.op is Ops.EXPAND) for source in node.src)
    return False


def padded_rows(left: UOp) -> UOp:
    """`left` (..., n, k) stored as (..., n, k + STRIP), zeros after each row, and viewed back as (..., n, k): its
    rows then lie k + STRIP elements apart, which for k a multiple of 1024 spreads a tile's rows over the L1's sets."""
    shape = shape_of(left)
    padding = tuple((0, 0) for _ in shape[:-1]) + ((0, STRIP),)
    stored = UOp(Ops.CONTIGUOUS, left.dtype, (UOp(Ops.PAD, left.dtype, (left,), padding),))
    return UOp(Ops.SHRINK, left.dtype, (stored,), tuple((0, size) for size in shape))


def row_tiles(left: UOp, casts: tuple[DType, ...], kept: bool) -> UOp:
    """`left` (..., n, k) copied as tiles of STRIP rows, each tile's k columns one after another ((..., n / STRIP, k,
    STRIP): the STRIP values of one column of a tile share a cache line) and viewed back as (..., n, k). The matmul
    tile's STRIP rows are then one stream instead of STRIP rows k * 4 bytes apart, which for k a multiple of 1024
    fall in one set of the L1 cache (and of the L2 cache's prefetch streams). `kept`: a realized matrix that is not
    trained keeps its copy (KEPT_COPY), like a packed right operand."""
    shape = shape_of(left)
    outer, n, k = shape[:-2], shape[-2], shape[-1]
    order = tuple(range(len(outer)))
    tiles = reshape(left, outer + (n // STRIP, STRIP, k))
    tiles = permute(tiles, order + (len(outer), len(outer) + 2, len(outer) + 1))  # (..., n / STRIP, k, STRIP)
    tiles = cast_chain(tiles, casts)
    tiles = UOp(Ops.CONTIGUOUS, tiles.dtype, (tiles,), KEPT_COPY if kept else None)
    back = permute(tiles, order + (len(outer), len(outer) + 2, len(outer) + 1))  # (..., n / STRIP, STRIP, k)
    return reshape(back, shape)


def packed_product(
    product: Product, pack_rows: bool = False, left_trained: bool = False, packs: RightPacks | None = None
) -> UOp:
    """left @ right with `right` copied first into strips of STRIP columns, each strip's k rows contiguous
    ((..., m / STRIP, k, STRIP)). The copy costs one pass over `right`; the product then reads each strip
    sequentially. Measured in CPU time, copy included: 128x768 @ 768x3072 22.8 -> 9.8 ms, 1024^3 72 -> 24 ms, 512^3
    with a transposed right operand (nn.Linear's x @ w.T) 66 -> 5 ms. `pack_rows`: `left` is copied into row tiles
    too (`row_tiles`, kept unless `left_trained`). Casts of an operand (float16 to float32) happen in its copy: gcc 12
    converts float16 one element at a time, and a 1024^3 float16 product converting inside its tile ran at 5 GFLOP/s,
    with float32 copies at the float32 product's speed (twice the bytes of a float16 copy, kept ones included).
    `packs` notes the copy of `right` (see RightPacks)."""
    left, right, batch = product.left, product.right, product.batch
    n, k, m = shape_of(left)[-2], shape_of(right)[-2], shape_of(right)[-1]
    if pack_rows:
        left = row_tiles(left, product.left_casts, kept=realized_matrix(left) and not left_trained)
    strips, outer = m // STRIP, shape_of(right)[:-2]
    packed = reshape(right, outer + (k, strips, STRIP))
    order = tuple(range(len(outer)))
    packed = permute(packed, order + (len(outer) + 1, len(outer), len(outer) + 2))  # (..., strips, k, 16)
    packed = cast_chain(packed, product.right_casts)  # the copy holds what the multiply reads (see below)
    packed = UOp(Ops.CONTIGUOUS, packed.dtype, (packed,), KEPT_COPY)  # kept while right is unchanged
    if packs is not None:
        packs[(right, product.right_casts)] = packed

    def lead(shape: tuple) -> tuple:  # right-aligned batch axes
        return (1,) * (len(batch) - len(shape)) + shape

    full = batch + (n, strips, k, STRIP)
    rows = expand(reshape(left, lead(shape_of(left)[:-2]) + (n, 1, k, 1)), full)
    rows = rows if pack_rows else cast_chain(rows, product.left_casts)
    columns = expand(reshape(packed, lead(outer) + (1, strips, k, STRIP)), full)
    multiply = UOp(Ops.MUL, product.multiply.dtype, (rows, columns))
    reduction = UOp(Ops.REDUCE_AXIS, product.reduction.dtype, (multiply,), product.reduction.arg)
    summed = reshape(reduction, batch + (n, strips, STRIP))
    return reshape(cast_chain(summed, product.result_casts), batch + (n, m))


# ---------------------------------------------------------------------------------------------------- the stage


def lay_out_for_targets(roots: tuple[UOp, ...], target_of: TargetOf) -> tuple[UOp, ...]:
    """`roots` with every tagged node rewritten for the Target of its device, and no tags left (the stage)."""
    from tg.codegen.schedule.layout_conv import WeightGradientTag, chunked_weight_gradient

    new: dict[UOp, UOp] = {}
    contiguous_rows: set[UOp] = set()
    packs: RightPacks = {}
    sink = UOp.sink(*roots)
    order = sink.toposort()
    readers = Counter(source for node in order for source in node.src)
    original: dict[UOp, UOp] = {}  # each rebuilt node's node in `roots`' graph, where `readers` counts its readers

    def read_once(node: UOp) -> bool:
        return readers[original.get(node, node)] == 1

    for node in order:
        sources = tuple(new[s] for s in node.src)
        rebuilt = node if all(a is b for a, b in zip(sources, node.src, strict=True)) else node.replace(src=sources)
        original[rebuilt] = node
        if isinstance(rebuilt.tag, MatmulTag):
            rebuilt = _lay_out_product(rebuilt, target_of, contiguous_rows, read_once, packs)
        elif isinstance(rebuilt.tag, WeightGradientTag):
            plain = rebuilt.replace(tag=None)
            rebuilt = chunked_weight_gradient(plain, rebuilt.tag, target_of(device_of(plain)))
        new[node] = rebuilt
    result = new[sink]
    if contiguous_rows:  # every use of a scattered left operand reads its contiguous copy, its gradients included
        result = result.substitute({left: UOp(Ops.CONTIGUOUS, left.dtype, (left,)) for left in contiguous_rows})
    # (second: the copies lie under those left operands, which the substitution above would otherwise not find)
    if shared := prefix_packs(packs):
        result = result.substitute(shared)
    return result.src


def _lay_out_product(
    top: UOp, target_of: TargetOf, contiguous_rows: set[UOp], read_once: Callable[[UOp], bool], packs: RightPacks
) -> UOp:
    tag = top.tag
    assert isinstance(tag, MatmulTag)
    plain = top.replace(tag=None)
    product = take_apart(plain)
    if product is None:
        return plain
    target = target_of(device_of(product.right))
    if wants_contiguous_rows(product, target):
        contiguous_rows.add(product.left)
    if not worth_packing(product, tag.right_trained, target):
        return plain
    pack_rows = worth_packing_rows(product, target)
    if not pack_rows and wants_padded_rows(product, target, read_once):
        product = replace(product, left=padded_rows(product.left))
    return packed_product(product, pack_rows, tag.left_trained, packs)


def prefix_packs(packs: RightPacks) -> dict[UOp, UOp]:
    """For each packed right operand that is a prefix of another one packed with the same casts (`unshrunk`), its
    copy -> the same prefix of the bigger copy: element (..., strip, row, lane) of a packed operand is element
    (..., row, strip * STRIP + lane) of the operand, so a prefix of the operand is a prefix of its copy. A causal
    attention's query blocks (tg.tensor.attention) read the first 256, 512, ... keys and values of the same heads,
    and the last block reads them all: one copy of each instead of one per block (over 1,024 tokens in blocks of
    256, eight copy kernels became two, about 0.9 of 1.4 ms)."""
    shared = {}
    for (right, casts), packed in packs.items():
        full = unshrunk(right)
        bigger = None if full is None else packs.get((full, casts))
        if bigger is not None:
            shared[packed] = UOp(Ops.SHRINK, packed.dtype, (bigger,), tuple((0, size) for size in shape_of(packed)))
    return shared


def unshrunk(view: UOp) -> UOp | None:
    """The view that `view` is a prefix of along every axis: `view` without a SHRINK that starts every axis at 0,
    maybe under a PERMUTE (keys[..., :n, :].transpose(-1, -2) is a prefix of keys.transpose(-1, -2)); None for
    any other view."""
    if view.op is Ops.PERMUTE:
        inner = unshrunk(view.src[0])
        return None if inner is None else permute(inner, view.arg)
    if view.op is Ops.SHRINK and all(start == 0 for start, _ in view.arg):
        return view.src[0]
    return None


__all__ = ["MatmulTag", "TargetOf", "default_target", "lay_out_for_targets"]
