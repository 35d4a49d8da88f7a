"""The KernelOptimizer: a kernel AST, the optimizations applied to it so far, and the checks that keep them legal.

(Not the scheduler: `tg.codegen.schedule` splits a tensor graph into kernels; this optimizes one kernel.)

Axes are the kernel's RANGEs of more than one element, ordered as the spec orders them (output axes, then local
and grouped ones, upcasts, reductions, unrolls; ties by axis id). `Opt.axis` indexes that list as it is when the
opt is applied, so a classic opt list replays the same way it was found.

Every opt either rewrites the AST into an equivalent kernel or raises `KernelOptError` saying why it cannot:
    split     range r (size n) by k: r -> outer*k + inner, outer of n/k keeps r's type, inner of k gets the new one
    padto     range r grows to a multiple of k; the extra iterations read nothing, store nothing, and add the
              reduction's identity
    block     a reduce range r (size n) -> block*k + inner: the BLOCK_REDUCE range of n/k blocks is looped outside
              the output loops and the output buffer carries the running result from one block to the next, so
              each element is still reduced in the same order (the same bits); legal when the kernel is one STORE
              of one REDUCE into a buffer it does not read
    swap      two output ranges exchange their loop order
"""

from __future__ import annotations

import math
from dataclasses import replace

from tg.codegen.dtype import PtrDType, dtypes
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps
from tg.codegen.uop.args import AxisType, KernelInfo
from tg.codegen.uop.index_algebra import simplify_indices
from tg.codegen.uop.ops import Ops, UOp
from tg.codegen.uop.pattern import PatternMatcher, UPat, graph_rewrite
from tg.codegen.uop.reductions import reduce_identity

AXIS_POSITION = {
    AxisType.DEVICE: -2, AxisType.LOOP: -1, AxisType.GLOBAL: 0, AxisType.WARP: 1, AxisType.LOCAL: 2,
    AxisType.GROUP_REDUCE: 2, AxisType.UPCAST: 3, AxisType.REDUCE: 4, AxisType.BLOCK_REDUCE: 4, AxisType.UNROLL: 5,
}  # fmt: skip
OUTPUT_TYPES = (AxisType.LOOP, AxisType.GLOBAL, AxisType.LOCAL)
REDUCE_TYPES = (AxisType.REDUCE, AxisType.GROUP_REDUCE)
SPLIT_TYPES = (
    AxisType.LOOP, AxisType.UPCAST, AxisType.UNROLL, AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.BLOCK_REDUCE,
)  # fmt: skip
MAX_UPCAST = 16  # one opt upcasts at most this many lanes (several opts may stack)
MAX_UNROLL = 32
MAX_REGISTER_LANES = 256  # accumulators per reduction: product of the upcast axes it depends on
MAX_UNROLLED_BODY = 1024  # copies of the innermost body: product of all upcast and unroll axes
MAX_CORE_GROUPS = 64  # core calls of a GROUP on a CPU (each is a call from the core threads)
MAX_PADDING_FACTOR = 4  # PADTO may at most quadruple an axis
CLASSIC_SPLITS = {
    OptOps.UPCAST: (AxisType.UPCAST, False),
    OptOps.UNROLL: (AxisType.UNROLL, False),
    OptOps.LOCAL: (AxisType.LOCAL, False),
    OptOps.GROUP: (AxisType.GROUP_REDUCE, False),
    OptOps.GROUPTOP: (AxisType.GROUP_REDUCE, True),
}


def range_size(rng: UOp) -> int:
    end = rng.src[0]
    return end.arg if end.op is Ops.CONST else -1


class KernelOptimizer:
    """A kernel being optimized. `has_local`: the device has workgroups and shared memory (the CPU has not).
    `core_groups`: without local memory, a GROUP_REDUCE is split across core calls whose partial results the last
    call to finish combines in share order (the CPU renderer); see `_check_core_group` for where that is legal."""

    def __init__(self, ast: UOp, has_local: bool = False, core_groups: bool = False) -> None:
        if ast.op is not Ops.SINK:
            raise TypeError(f"a kernel AST is a SINK, not {ast.op!r}")
        self.ast = ast
        self.has_local = has_local
        self.core_groups = core_groups
        info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
        self.applied_opts: list[Opt] = list(info.applied_opts)

    def copy(self) -> KernelOptimizer:
        other = KernelOptimizer(self.ast, self.has_local, self.core_groups)
        other.applied_opts = list(self.applied_opts)
        return other

    # -------------------------------------------------------------------------------- what the kernel looks like

    @property
    def rngs(self) -> list[UOp]:
        found = [u for u in self.ast.toposort() if u.op is Ops.RANGE and range_size(u) != 1]
        return sorted(found, key=lambda r: (AXIS_POSITION[r.arg.axis_type], r.arg.axis_id))

    @property
    def full_shape(self) -> tuple[int, ...]:
        return tuple(range_size(r) for r in self.rngs)

    @property
    def axis_types(self) -> tuple[AxisType, ...]:
        return tuple(r.arg.axis_type for r in self.rngs)

    @property
    def shape_len(self) -> int:
        return len(self.rngs)

    @property
    def reduceops(self) -> list[UOp]:
        return [u for u in self.ast.toposort() if u.op is Ops.REDUCE]

    @property
    def upcasted(self) -> int:
        return sum(1 for t in self.axis_types if t in (AxisType.UPCAST, AxisType.UNROLL))

    def axes_of(self, *types: AxisType) -> list[int]:
        return [i for i, t in enumerate(self.axis_types) if t in types]

    def shape_str(self) -> str:
        return " ".join(f"{size}{t.letter}" for size, t in zip(self.full_shape, self.axis_types, strict=True))

    def has_nested_reductions(self) -> bool:
        reduces = self.reduceops
        return any(r is not s and s in r.src[0].toposort() for r in reduces for s in reduces)

    def has_row_reductions(self) -> bool:
        """A reduction that the innermost output range does not change: a row reduction the scheduler fused into
        its reader (a softmax's max), computed once per row before the loop along the row opens. (One that only
        an outer output range does not change is computed inside that loop anyway.)"""
        outputs = [r for r in self.rngs if r.arg.axis_type in OUTPUT_TYPES]
        return bool(outputs) and any(outputs[-1] not in r.toposort() for r in self.reduceops)

    # -------------------------------------------------------------------------------- applying opts

    def real_axis(self, op: OptOps, axis: int | None) -> int:
        """The index in `rngs` that `axis` of a classic op means: UNROLL counts reduce-type axes, GROUP counts
        REDUCE axes, everything else counts all axes."""
        if axis is None:
            raise KernelOptError(f"{op!r} needs an axis")
        if op is OptOps.UNROLL:
            candidates = self.axes_of(*REDUCE_TYPES)
        elif op in (OptOps.GROUP, OptOps.GROUPTOP, OptOps.BLOCK):
            candidates = self.axes_of(AxisType.REDUCE)
        else:
            candidates = list(range(self.shape_len))
        if not 0 <= axis < len(candidates):
            raise KernelOptError(f"{op!r} axis {axis} does not exist (the kernel's axes: {self.shape_str() or 'none'})")
        return candidates[axis]

    def apply_opt(self, opt: Opt, append_opt: bool = True) -> None:
        """Apply `opt` to the kernel (raises KernelOptError, leaving the kernel unchanged, if it is illegal)."""
        before = (self.ast, self.has_local)
        try:
            self._apply(opt)
        except KernelOptError:
            self.ast, self.has_local = before
            raise
        if append_opt:
            self.applied_opts.append(opt)

    def _apply(self, opt: Opt) -> None:
        op = opt.op
        if op is OptOps.NOLOCALS:
            self.has_local = False
        elif op in CLASSIC_SPLITS:
            new_type, top = CLASSIC_SPLITS[op]
            if not isinstance(opt.arg, int):
                raise KernelOptError(f"{op!r} takes an int amount, not {opt.arg!r}")
            self._split(self.real_axis(op, opt.axis), opt.arg, new_type, top)
        elif op is OptOps.BLOCK:
            self._block(self.real_axis(op, opt.axis), opt.arg)
        elif op is OptOps.SPLIT:
            amount, new_type, top = _split_arg(opt.arg)
            self._split(self.real_axis(op, opt.axis), amount, new_type, top)
        elif op is OptOps.PADTO:
            self._padto(self.real_axis(op, opt.axis), opt.arg)
        elif op is OptOps.SWAP:
            self._swap(self.real_axis(op, opt.axis), opt.arg)
        else:
            raise KernelOptError(f"unknown opt {opt!r}")

    def _split(self, axis: int, amount: int, new_type: AxisType, top: bool) -> None:
        rng = self.rngs[axis]
        size, old_type = range_size(rng), rng.arg.axis_type
        amount = size if amount == 0 else amount
        self._check_split(rng, size, amount, old_type, new_type)
        self.shift_to(rng, amount, new_type, top)
        self._check_register_budget()

    def _block(self, axis: int, block: object) -> None:
        size = range_size(self.rngs[axis])
        if not isinstance(block, int) or block < 2:
            raise KernelOptError(f"BLOCK takes a block size of at least 2, not {block!r}")
        if size < 0 or size % block != 0 or block == size:
            raise KernelOptError(f"cannot cut a reduce axis of {size} into blocks of {block}")
        self._split(axis, size // block, AxisType.BLOCK_REDUCE, True)

    def blocked_store(self) -> UOp | None:
        """The STORE whose buffer carries a BLOCK_REDUCE's running result: the kernel's only STORE, of its only
        REDUCE, into a buffer the kernel does not read (None when the kernel is not like that)."""
        stores, reduces = list(self.ast.src), self.reduceops
        if len(stores) != 1 or len(reduces) != 1 or stores[0].op is not Ops.STORE:
            return None
        store = stores[0]
        if store.src[1] is not reduces[0] or store.src[0].op is not Ops.INDEX:
            return None
        buffer = store.src[0].src[0]
        if not isinstance(buffer.dtype, PtrDType) or buffer.dtype.base != reduces[0].dtype:
            return None
        loads = [u for u in self.ast.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
        return None if any(load.src[0].src[0] is buffer for load in loads) else store

    def _check_split(self, rng: UOp, size: int, amount: int, old_type: AxisType, new_type: AxisType) -> None:
        if size < 0:
            raise KernelOptError("cannot split a range of symbolic size")
        if amount < 1 or size % amount != 0:
            raise KernelOptError(f"cannot split an axis of {size} by {amount}: not a divisor")
        if amount == 1:
            raise KernelOptError("a split by 1 does nothing")
        if new_type is AxisType.LOCAL and not self.has_local:
            raise KernelOptError(f"{new_type.name} needs local memory, which this device does not have")
        if new_type is AxisType.GROUP_REDUCE and not self.has_local:
            self._check_core_group(amount)
        if new_type in (AxisType.LOOP, AxisType.UPCAST, AxisType.LOCAL) and old_type not in OUTPUT_TYPES:
            raise KernelOptError(f"{new_type.name} splits an output axis, not a {old_type.name} axis")
        if new_type in (AxisType.UNROLL, AxisType.GROUP_REDUCE) and old_type not in REDUCE_TYPES:
            raise KernelOptError(f"{new_type.name} splits a reduce axis, not a {old_type.name} axis")
        if new_type is AxisType.GROUP_REDUCE and self.has_nested_reductions():
            raise KernelOptError("no GROUP inside another reduction")
        if new_type is AxisType.GROUP_REDUCE and self.axes_of(AxisType.BLOCK_REDUCE):
            raise KernelOptError("no GROUP in a kernel with a BLOCK_REDUCE axis")
        if new_type is AxisType.BLOCK_REDUCE:
            self._check_block(old_type)
        if new_type is AxisType.UPCAST and amount > MAX_UPCAST:
            raise KernelOptError(f"upcast by {amount} is more than {MAX_UPCAST}")
        if new_type is AxisType.UNROLL and amount > MAX_UNROLL:
            raise KernelOptError(f"unroll by {amount} is more than {MAX_UNROLL}")
        if new_type is AxisType.UPCAST and self.has_nested_reductions():
            raise KernelOptError("upcast in a kernel with nested reductions is not supported by the lowering")
        if new_type not in SPLIT_TYPES:
            raise KernelOptError(f"cannot split into a {new_type.name} axis")

    def _check_core_group(self, amount: int) -> None:
        """A GROUP on a device without local memory: `amount` core calls each reduce a share. Legal when nothing
        else is split across calls: no output loop (every output is in register lanes), one reduction, no other
        GROUP or BLOCK axis."""
        if not self.core_groups:
            raise KernelOptError("GROUP_REDUCE needs local memory or core groups, which this device does not have")
        if self.axes_of(*OUTPUT_TYPES):
            raise KernelOptError("a GROUP across cores needs every output in register lanes (no output loop)")
        if len(self.reduceops) != 1 or self.axes_of(AxisType.GROUP_REDUCE, AxisType.BLOCK_REDUCE):
            raise KernelOptError("a GROUP across cores needs one reduction and no other GROUP or BLOCK axis")
        if self.reduceops[0].dtype.scalar() is dtypes.bfloat16:  # its partials would need bfloat16 rounding
            raise KernelOptError("a GROUP across cores of a bfloat16 reduction is not supported")
        if amount > MAX_CORE_GROUPS:
            raise KernelOptError(f"a GROUP across cores of {amount} is more than {MAX_CORE_GROUPS} calls")

    def _check_block(self, old_type: AxisType) -> None:
        if old_type is not AxisType.REDUCE:
            raise KernelOptError(f"BLOCK_REDUCE splits a REDUCE axis, not a {old_type.name} axis")
        if self.axes_of(AxisType.BLOCK_REDUCE, AxisType.GROUP_REDUCE):
            raise KernelOptError("a kernel has at most one BLOCK_REDUCE axis and none with GROUP_REDUCE")
        if self.blocked_store() is None:
            raise KernelOptError("BLOCK needs a kernel that stores one reduction into a buffer it does not read")

    def _check_register_budget(self) -> None:
        upcasts = [range_size(r) for r in self.rngs if r.arg.axis_type is AxisType.UPCAST]
        unrolls = [range_size(r) for r in self.rngs if r.arg.axis_type is AxisType.UNROLL]
        if math.prod(upcasts) > MAX_REGISTER_LANES:
            raise KernelOptError(f"{math.prod(upcasts)} upcast lanes is more than {MAX_REGISTER_LANES} registers")
        if math.prod(upcasts) * math.prod(unrolls) > MAX_UNROLLED_BODY:
            raise KernelOptError(f"upcasts and unrolls copy the body more than {MAX_UNROLLED_BODY} times")

    def shift_to(self, rng: UOp, amount: int, new_type: AxisType, top: bool = False) -> tuple[UOp, UOp | None]:
        """Split `rng` into (kept, new): new has `amount` iterations and type `new_type`; kept, with the rest, keeps
        `rng`'s id and type (None when new takes the whole axis). The AST is rewritten in place; an illegal
        result (checked by the caller before) is never produced here."""
        size = range_size(rng)
        next_id = max(r.arg.axis_id for r in self.ast.toposort() if r.op is Ops.RANGE) + 1
        new = UOp.range(amount, next_id, new_type)
        kept = None if amount == size else rng.replace(src=(UOp.const(size // amount, dtypes.index), *rng.src[1:]))
        if kept is None:
            value = new
        elif top:
            value = new * (size // amount) + kept
        else:
            value = kept * amount + new
        self._replace_range(rng, value, [r for r in (kept, new) if r is not None])
        return kept if kept is not None else new, new if kept is not None else None

    def _replace_range(self, rng: UOp, value: UOp, replacements: list[UOp]) -> None:
        """Substitute `value` for `rng` everywhere, and `replacements` for it in the range lists of REDUCEs."""
        marker = UOp(Ops.NOOP, dtypes.index, (value,), "split")  # keeps REDUCE sources findable after the rewrite
        ast = self.ast.substitute({rng: marker})
        fixed_reduces: dict[UOp, UOp] = {}
        for node in ast.toposort():
            if node.op is Ops.REDUCE and marker in node.src[1:]:
                ranges = [s for s in node.src[1:] if s is not marker] + replacements
                fixed_reduces[node] = UOp(Ops.REDUCE, node.dtype, (node.src[0], *ranges), node.arg)
        ast = _substitute_bottom_up(ast, fixed_reduces)
        ast = ast.substitute({marker: value})
        self.ast = graph_rewrite(ast, simplify_indices, name="simplify after opt")

    def _padto(self, axis: int, multiple: object) -> None:
        rng = self.rngs[axis]
        size, kind = range_size(rng), rng.arg.axis_type
        if not isinstance(multiple, int) or multiple < 2:
            raise KernelOptError(f"PADTO takes an int amount of at least 2, not {multiple!r}")
        if size < 0:
            raise KernelOptError("cannot pad a range of symbolic size")
        if kind in (AxisType.UPCAST, AxisType.UNROLL, AxisType.BLOCK_REDUCE):
            raise KernelOptError(f"cannot pad an {kind.name} axis")
        padded = -(-size // multiple) * multiple
        if padded == size:
            raise KernelOptError(f"axis of {size} is already a multiple of {multiple}")
        if padded > MAX_PADDING_FACTOR * size:
            raise KernelOptError(f"padding {size} to {padded} is more than {MAX_PADDING_FACTOR}x the work")
        grown = rng.replace(src=(UOp.const(padded, dtypes.index), *rng.src[1:]))
        inside = grown < size
        masked = graph_rewrite(self.ast.substitute({rng: grown}), _masking(grown, inside), name="mask padding")
        tagged = {u: u.replace(tag=None) for u in masked.toposort() if u.tag == "masked"}
        self.ast = _substitute_bottom_up(masked, tagged)

    def _swap(self, axis: int, other: object) -> None:
        if not isinstance(other, int):
            raise KernelOptError(f"SWAP takes the other axis as an int, not {other!r}")
        rngs = self.rngs
        if not 0 <= other < len(rngs) or other == axis:
            raise KernelOptError(f"cannot swap axis {axis} with axis {other}")
        a, b = rngs[axis], rngs[other]
        if a.arg.axis_type not in (AxisType.GLOBAL, AxisType.LOOP) or b.arg.axis_type not in (
            AxisType.GLOBAL,
            AxisType.LOOP,
        ):
            raise KernelOptError("SWAP exchanges two output (GLOBAL/LOOP) axes only")
        new_a = a.replace(arg=replace(a.arg, axis_id=b.arg.axis_id))
        new_b = b.replace(arg=replace(b.arg, axis_id=a.arg.axis_id))
        self.ast = self.ast.substitute({a: new_a, b: new_b})

    def get_optimized_ast(self, name_override: str | None = None) -> UOp:
        """The kernel AST with the opts applied; its KernelInfo records them (and asks for nothing more)."""
        info = self.ast.arg if isinstance(self.ast.arg, KernelInfo) else KernelInfo()
        name = info.name if name_override is None else name_override
        new_info = replace(
            info, name=name, axis_types=self.axis_types, applied_opts=tuple(self.applied_opts), opts_to_apply=None
        )
        return self.ast.replace(arg=new_info)


def _split_arg(arg: object) -> tuple[int, AxisType, bool]:
    if not isinstance(arg, tuple) or len(arg) not in (2, 3):
        raise KernelOptError(f"SPLIT takes (amount, AxisType[, top]), not {arg!r}")
    amount, new_type = arg[0], arg[1]
    top = bool(arg[2]) if len(arg) == 3 else False
    if not isinstance(amount, int) or not isinstance(new_type, AxisType):
        raise KernelOptError(f"SPLIT takes (amount, AxisType[, top]), not {arg!r}")
    return amount, new_type, top


def _substitute_bottom_up(ast: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Like UOp.substitute, but a replacement's own sources are rewritten too (for nested REDUCEs)."""
    if not mapping:
        return ast
    new: dict[UOp, UOp] = {}
    for node in ast.toposort():
        target = mapping.get(node, node)
        new_src = tuple(new.get(s, s) for s in target.src)
        new[node] = target if new_src == target.src else target.replace(src=new_src)
    return new[ast]


def _masking(grown: UOp, inside: UOp) -> PatternMatcher:
    """Rules that make the padded iterations of `grown` harmless: every access that depends on it is gated by
    `inside`, and a reduction over it adds its identity there."""

    def depends(node: UOp) -> bool:
        return grown in node.toposort()

    def gate_load(index: UOp, load: UOp) -> UOp | None:
        if not depends(index.src[1]) or index.tag == "masked":
            return None
        gate = inside if len(index.src) < 3 else index.src[2] & inside
        gated = UOp(Ops.INDEX, index.dtype, (index.src[0], index.src[1], gate), tag="masked")
        alt = load.src[1] if len(load.src) > 1 else UOp.const(0, load.dtype)
        return UOp(Ops.LOAD, load.dtype, (gated, alt))

    def gate_store(index: UOp, store: UOp) -> UOp | None:
        if not depends(index.src[1]) or index.tag == "masked":
            return None
        gate = inside if len(index.src) < 3 else index.src[2] & inside
        gated = UOp(Ops.INDEX, index.dtype, (index.src[0], index.src[1], gate), tag="masked")
        return UOp(Ops.STORE, store.dtype, (gated, *store.src[1:]))

    def mask_reduce(reduce: UOp) -> UOp | None:
        if grown not in reduce.src[1:] or reduce.tag == "masked":
            return None
        identity = UOp.const(reduce_identity(reduce.arg, reduce.dtype), reduce.dtype)
        body = inside.where(reduce.src[0], identity)
        return UOp(Ops.REDUCE, reduce.dtype, (body, *reduce.src[1:]), reduce.arg, tag="masked")

    return PatternMatcher(
        [
            (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="index"),), allow_any_len=True, name="load"), gate_load),
            (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="index"),), allow_any_len=True, name="store"), gate_store),
            (UPat(Ops.REDUCE, name="reduce"), mask_reduce),
        ],
        name="mask padding",
    )
