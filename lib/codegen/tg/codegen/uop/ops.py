"""The UOp IR: one immutable, hash-consed node type for every stage from tensor graph to machine code.

`UOp(op, dtype, src, arg, tag)` returns the existing node when one with the same five fields is alive, so
structurally equal graphs are the same object: `is` compares graphs, and a UOp is a valid dict key and cache key.
The cache holds nodes weakly and is safe to use from several threads.

Integer semantics: `//` (IDIV) and `%` (MOD) on UOps truncate toward zero, as C does (`-7 // 2 == -3`,
`-7 % 2 == -1`). `sym_infer`, `simplify`, the bounds `vmin`/`vmax` and generated code all follow this. Tensor-level
`//` and `%` follow numpy's floor semantics and are built on top. The `index` dtype is an unbounded integer.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
import weakref
from collections.abc import Callable
from enum import IntEnum, auto
from typing import Any

from tg.codegen.dtype import AddrSpace, DType, PtrDType, dtypes, truncate
from tg.codegen.serial import enum_by_name
from tg.codegen.uop.args import AxisType, BufferArg, CallInfo, KernelInfo, ParamArg, RangeArg, ReduceArg, VarArg


class Ops(IntEnum):
    """Every op of the IR, grouped by what they describe; `GroupOp` has the sets passes match on. An op is here
    because some stage produces it and another consumes it; `ARG_TYPES` says what each one's `arg` holds."""

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return enum_by_name(self)  # by name, never by number: stored IR survives a new or reordered member

    # kernel parameters, memory and variables
    PARAM = auto()
    BUFFER = auto()
    DEFINE_VAR = auto()
    BIND = auto()
    SPECIAL = auto()  # a hardware index (gidx0, lidx1): GPU renderers' global and local ids
    DEVICE = auto()
    # constants
    CONST = auto()
    # loops and memory access
    RANGE = auto()
    END = auto()
    REDUCE = auto()
    INDEX = auto()
    LOAD = auto()
    STORE = auto()
    AFTER = auto()
    PREFETCH = auto()  # a hint, no value: the memory INDEX src[0] names will be read soon (C: __builtin_prefetch)
    # graph structure
    SINK = auto()
    GROUP = auto()
    NOOP = auto()
    # programs
    LINEAR = auto()
    PROGRAM = auto()  # a kernel compiled for a device: (kernel AST, SOURCE, BINARY), arg its ProgramSource
    SOURCE = auto()  # a program's rendered source text (arg)
    BINARY = auto()  # a program's compiled binary (arg, bytes)
    # vectors
    VECTORIZE = auto()
    # type conversion
    CAST = auto()
    BITCAST = auto()
    # unary ALU
    NEG = auto()
    RECIPROCAL = auto()
    SQRT = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    TRUNC = auto()
    # binary ALU
    ADD = auto()
    SUB = auto()
    MUL = auto()
    FDIV = auto()
    IDIV = auto()
    MOD = auto()
    MAX = auto()
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()
    POW = auto()
    # ternary ALU
    WHERE = auto()
    MULACC = auto()
    # movement ops (tensor graph)
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()
    # tensor-graph ops
    COPY = auto()
    CONTIGUOUS = auto()
    DETACH = auto()
    ASSIGN = auto()
    REDUCE_AXIS = auto()
    GATHER = auto()  # read a source at positions held in index tensors (a data-dependent load)
    CALL = auto()  # a kernel AST (src[0]) run on the tensors src[1:] (custom kernels; tg.tensor.custom_kernel)
    MULTI = auto()  # a tensor split across devices: one source per device, arg the split axis (None: copies)

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    __str__ = __repr__


class GroupOp:
    """Sets of ops that passes treat alike."""

    Unary = frozenset({Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC})
    Binary = frozenset(
        {
            Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
            Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.POW,
        }
    )  # fmt: skip
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Buffer = frozenset({Ops.LOAD, Ops.STORE, Ops.CONST, Ops.PARAM, Ops.BUFFER})
    Irreducible = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE})


NoArg = type(None)
ARG_TYPES: dict[Ops, type | tuple[type, ...]] = {
    Ops.PARAM: ParamArg, Ops.BUFFER: BufferArg, Ops.DEFINE_VAR: VarArg, Ops.BIND: NoArg,
    Ops.SPECIAL: str,  # the index's name
    Ops.DEVICE: str,  # the device name
    Ops.CONST: (bool, int, float),
    Ops.RANGE: RangeArg, Ops.END: NoArg,
    Ops.REDUCE: Ops,  # the combining op: ADD, MUL or MAX
    Ops.INDEX: NoArg, Ops.LOAD: NoArg, Ops.STORE: NoArg, Ops.AFTER: NoArg, Ops.PREFETCH: NoArg,
    Ops.SINK: (NoArg, KernelInfo),  # a kernel AST's SINK carries its KernelInfo
    Ops.GROUP: NoArg,
    Ops.NOOP: (NoArg, str),  # a marker may name why it is there
    Ops.LINEAR: (NoArg, KernelInfo),
    Ops.PROGRAM: object,  # the ProgramSource (tg.codegen.pipeline): its name, launch size, variables, estimates
    Ops.SOURCE: str, Ops.BINARY: bytes,
    Ops.VECTORIZE: NoArg,
    Ops.CAST: NoArg, Ops.BITCAST: NoArg,
    **{op: NoArg for op in GroupOp.ALU},
    Ops.RESHAPE: tuple, Ops.PERMUTE: tuple, Ops.EXPAND: tuple,  # the new shape / the axis order
    Ops.PAD: tuple, Ops.SHRINK: tuple,  # (before, after) or (start, end) per axis
    Ops.FLIP: tuple,  # one bool per axis
    Ops.COPY: NoArg, Ops.CONTIGUOUS: NoArg, Ops.DETACH: NoArg, Ops.ASSIGN: NoArg,
    Ops.REDUCE_AXIS: ReduceArg,
    Ops.GATHER: tuple,  # the source axes the index tensors replace, one per index
    Ops.CALL: (NoArg, CallInfo),  # its grad_fxn and whether it is precompiled
    Ops.MULTI: (NoArg, int),  # the axis the shards split (None: every device holds the whole tensor)
}  # fmt: skip


def arg_type_error(node: UOp) -> str | None:
    """Why `node.arg` is not of the type its op declares in ARG_TYPES, or None when it is."""
    expected = ARG_TYPES[node.op]
    if isinstance(node.arg, expected):
        return None
    return f"{node.op!r} takes an arg of type {expected}, got {type(node.arg).__name__} {node.arg!r}"


# ---------------------------------------------------------------------------------------------------- the cache

_cache: dict[tuple, weakref.KeyedRef] = {}
_cache_lock = threading.RLock()


def _forget(ref: weakref.KeyedRef) -> None:
    """Weakref callback: drop a dead node's cache entry, unless a new node already took its key."""
    with _cache_lock:
        if _cache.get(ref.key) is ref:
            del _cache[ref.key]


def _cache_key(op: Ops, dtype: DType, src: tuple, arg: Any, tag: Any) -> tuple:
    # 1 == 1.0 == True, 0.0 == -0.0 and nan != nan in Python: key floats and bools by type and repr so that
    # each gets its own node
    arg_type = type(arg)
    if arg_type is float or arg_type is bool:
        return (op, dtype, src, (arg_type, repr(arg)), tag)
    return (op, dtype, src, arg, tag)


class UOp:
    """One node of the IR. Build with `UOp(op, dtype, src, arg, tag)` or the constructors below; never mutate."""

    __slots__ = ("op", "dtype", "src", "arg", "tag", "_bounds", "_key", "_shape", "__weakref__")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any
    _bounds: tuple[Any, Any]  # (vmin, vmax), computed on first use by tg.codegen.uop.bounds
    _key: bytes  # the content hash, computed on first use by `key`
    _shape: tuple[Any, ...]  # a tensor-graph node's shape, computed on first use by tg.codegen.schedule.graph

    def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None):
        if type(src) is not tuple:
            src = tuple(src)
        key = _cache_key(op, dtype, src, arg, tag)
        ref = _cache.get(key)
        if ref is not None:
            found = ref()
            if found is not None:
                return found
        with _cache_lock:
            ref = _cache.get(key)
            if ref is not None:
                found = ref()
                if found is not None:
                    return found
            node = object.__new__(cls)
            _set = object.__setattr__
            _set(node, "op", op)
            _set(node, "dtype", dtype)
            _set(node, "src", src)
            _set(node, "arg", arg)
            _set(node, "tag", tag)
            _cache[key] = weakref.KeyedRef(node, _forget, key)
            return node

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("UOp is immutable; use .replace(...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("UOp is immutable")

    def __reduce__(self) -> tuple:
        return (UOp, (self.op, self.dtype, self.src, self.arg, self.tag))

    def __repr__(self) -> str:
        from tg.codegen.uop.render import bound_size_text, graph_listing

        return bound_size_text(self) or graph_listing(self)

    def __bool__(self) -> bool:
        """A UOp is only truthy when its bounds decide it (so `if x < 4:` cannot silently mean True)."""
        if self.vmin == self.vmax:
            return bool(self.vmin)
        raise ValueError(f"the truth value of {self.render()} is not known (bounds {self.vmin}..{self.vmax})")

    # -------------------------------------------------------------------------------- fields and properties

    def replace(self, **fields: Any) -> UOp:
        """A copy with some of op, dtype, src, arg, tag changed."""
        unknown = set(fields) - {"op", "dtype", "src", "arg", "tag"}
        if unknown:
            raise AssertionError(f"UOp has no field(s) {sorted(unknown)}")
        return UOp(
            fields.get("op", self.op),
            fields.get("dtype", self.dtype),
            fields.get("src", self.src),
            fields.get("arg", self.arg),
            fields.get("tag", self.tag),
        )

    @property
    def val(self) -> Any:
        """The value of a CONST."""
        if self.op is not Ops.CONST:
            raise ValueError(f"{self.op!r} has no constant value")
        return self.arg

    @property
    def ptrdtype(self) -> PtrDType:
        if not isinstance(self.dtype, PtrDType):
            raise TypeError(f"{self.dtype!r} is not a pointer")
        return self.dtype

    @property
    def addrspace(self) -> AddrSpace:
        return self.ptrdtype.addrspace

    @property
    def size(self) -> int:
        return self.ptrdtype.size

    @property
    def vmin(self) -> int | float:
        """A lower bound of the value (exact for constants)."""
        return self._min_max[0]

    @property
    def vmax(self) -> int | float:
        """An upper bound of the value (exact for constants)."""
        return self._min_max[1]

    @property
    def _min_max(self) -> tuple[Any, Any]:
        try:
            return self._bounds
        except AttributeError:
            from tg.codegen.uop.bounds import compute_bounds

            compute_bounds(self)
            return self._bounds

    @property
    def key(self) -> bytes:
        """A content hash of the whole graph, stable across processes and runs (a cache key)."""
        try:
            return self._key
        except AttributeError:
            for node in self.toposort(lambda u: not hasattr(u, "_key")):
                if hasattr(node, "_key"):
                    continue
                content = f"{node.op.name}|{node.dtype!r}|{node.arg!r}|{node.tag!r}".encode()
                digest = hashlib.sha256(content)
                for s in node.src:
                    digest.update(s._key)
                object.__setattr__(node, "_key", digest.digest())
            return self._key

    # -------------------------------------------------------------------------------- graph walks

    def toposort(self, gate: Any = None) -> list[UOp]:
        """Every node of the graph, sources before their users. `gate(node)` False stops the walk below node."""
        order: list[UOp] = []
        visited: set[UOp] = set()
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, sources_done = stack.pop()
            if sources_done:
                order.append(node)
                continue
            if node in visited:
                continue
            visited.add(node)
            stack.append((node, True))
            if gate is None or gate(node):
                for s in reversed(node.src):
                    if s not in visited:
                        stack.append((s, False))
        return order

    def substitute(self, mapping: dict[UOp, UOp], name: str | None = None) -> UOp:
        """The graph with every node in `mapping` replaced (replacements are not searched again)."""
        if all(old is replacement for old, replacement in mapping.items()):
            return self  # nothing changes (a view whose base has not moved): no walk of the graph
        new: dict[UOp, UOp] = {}
        for node in self.toposort(lambda u: u not in mapping):
            if node in mapping:
                new[node] = mapping[node]
                continue
            new_src = tuple(new[s] for s in node.src)
            new[node] = node if _same(new_src, node.src) else node.replace(src=new_src)
        return new[self]

    def simplify(self) -> UOp:
        """This expression after the symbolic rewrite rules."""
        from tg.codegen.uop.pattern import graph_rewrite
        from tg.codegen.uop.symbolic import symbolic

        return graph_rewrite(self, symbolic, name="simplify")

    def render(self) -> str:
        """A one-line, readable rendering of an index expression: `((x*4)+y)`."""
        from tg.codegen.uop.render import render_expr

        return render_expr(self)

    # -------------------------------------------------------------------------------- constructors

    @staticmethod
    def const(value: Any, dtype: DType = dtypes.index) -> UOp:
        """A constant; a vector dtype makes a VECTORIZE of equal scalar constants."""
        if isinstance(value, UOp):
            return value
        if dtype.count > 1:
            scalar = UOp.const(value, dtype.scalar())
            return UOp(Ops.VECTORIZE, dtype, (scalar,) * dtype.count)
        return UOp(Ops.CONST, dtype, (), truncate(value, dtype))

    def const_like(self, value: Any) -> UOp:
        return UOp.const(value, self.dtype)

    @staticmethod
    def variable(name: str, vmin: int, vmax: int, dtype: DType = dtypes.index) -> UOp:
        """A symbolic integer known to lie in [vmin, vmax]."""
        return UOp(Ops.DEFINE_VAR, dtype, (), VarArg(name, vmin, vmax))

    def bind(self, value: int) -> UOp:
        """This variable with a concrete value attached."""
        if self.op is not Ops.DEFINE_VAR:
            raise ValueError(f"only variables can be bound, not {self.op!r}")
        if not self.arg.vmin <= value <= self.arg.vmax:
            raise ValueError(f"{value} is outside the bounds of variable {self.arg}")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))

    def unbind(self) -> tuple[UOp, int]:
        if self.op is not Ops.BIND:
            raise ValueError(f"{self.op!r} is not a BIND")
        return self.src[0], self.src[1].arg

    @staticmethod
    def range(
        end: UOp | int,
        axis_id: int,
        axis_type: AxisType = AxisType.LOOP,
        dtype: DType = dtypes.index,
        src: tuple[UOp, ...] = (),
    ) -> UOp:
        """A loop counter running 0..end-1."""
        return UOp(Ops.RANGE, dtype, (UOp.const(end, dtype), *src), RangeArg(axis_id, axis_type))

    @staticmethod
    def special(size: UOp | int, name: str, dtype: DType = dtypes.index) -> UOp:
        """A hardware index (`gidx0`, `lidx1`, ...) running 0..size-1."""
        return UOp(Ops.SPECIAL, dtype, (UOp.const(size, dtype),), name)

    @staticmethod
    def param(
        slot: int, dtype: DType, size: int | tuple[int, ...] | None = None, addrspace: AddrSpace = AddrSpace.GLOBAL,
        name: str = "",
    ) -> UOp:  # fmt: skip
        """Kernel argument `slot`: a pointer to `size` elements of `dtype`, or a scalar when size is None."""
        if isinstance(size, tuple):
            size = math.prod(size)
        param_dtype = dtype if size is None else dtype.ptr(size, addrspace)
        return UOp(Ops.PARAM, param_dtype, (), ParamArg(slot, name))

    def sink(self, *srcs: UOp, arg: Any = None) -> UOp:
        """A SINK of this node and `srcs` (also callable as `UOp.sink(a, b, arg=...)`)."""
        return UOp(Ops.SINK, dtypes.void, (self, *srcs), arg)

    def group(self, *srcs: UOp) -> UOp:
        return UOp(Ops.GROUP, dtypes.void, (self, *srcs))

    def index(self, *idx: UOp) -> UOp:
        """The address of element `idx[0]` of this buffer; an optional last source is a bool gate. A shaped buffer
        (a custom kernel's placeholder, a RESHAPE of a PARAM) also takes one index per axis, `A.index(i, j)`."""
        if len(idx) > 1 and self.op in (Ops.RESHAPE, Ops.AFTER) and isinstance(self.dtype, PtrDType):
            idx = self._flat_position(idx)
        return UOp(Ops.INDEX, self.dtype, (self, *idx))

    def __getitem__(self, idx: UOp | int | tuple[UOp | int, ...]) -> UOp:
        """`A[i]`, `A[i, j]`: the address of an element of a custom kernel's placeholder (see `index`)."""
        if not isinstance(self.dtype, PtrDType):
            raise TypeError(f"only a buffer (a pointer: a custom kernel's placeholder) is indexed, not {self.op!r}")
        positions = idx if isinstance(idx, tuple) else (idx,)
        return self.index(*(UOp.const(p) if isinstance(p, int) else p for p in positions))

    def __iter__(self) -> Any:  # (without it, `__getitem__` would make a pointer UOp iterable without end)
        raise TypeError("a UOp is not iterable")

    def _flat_position(self, idx: tuple[UOp, ...]) -> tuple[UOp, ...]:
        """One index per axis of this shaped buffer as the row-major element index (a trailing bool gate kept)."""
        gate = idx[-1:] if idx[-1].dtype.scalar() is dtypes.bool else ()
        positions = idx[: len(idx) - len(gate)]
        shape = self.shape
        if len(positions) == 1:
            return idx
        if len(positions) != len(shape):
            raise IndexError(f"a buffer of shape {shape} takes 1 (flat) or {len(shape)} indices, got {len(positions)}")
        flat = positions[0]
        for size, position in zip(shape[1:], positions[1:], strict=True):
            flat = flat * size + position
        return (flat, *gate)

    @property
    def shape(self) -> tuple[Any, ...]:
        """The shape of a tensor-graph node, or of a custom kernel's placeholder (its tensor's shape)."""
        from tg.codegen.schedule.graph import shape_of

        return shape_of(self)

    def numel(self) -> Any:
        """The number of elements of this node's shape."""
        return math.prod(self.shape)

    def flatten(self) -> UOp:
        """This node as flat storage: a placeholder's PARAM (index it with row-major positions), else a RESHAPE to
        one axis."""
        if self.op is Ops.RESHAPE and self.src[0].op is Ops.PARAM:
            return self.src[0]
        return self if len(self.shape) == 1 else UOp(Ops.RESHAPE, self.dtype, (self,), (self.numel(),))

    @property
    def base(self) -> UOp:
        """The node under this one's movement ops: a placeholder's PARAM, a view's BUFFER."""
        node = self
        while node.op in GroupOp.Movement:
            node = node.src[0]
        return node

    def load(self, *alt: UOp, dtype: DType | None = None) -> UOp:
        """The value at this address (an INDEX); `alt` is returned where the INDEX's gate is false."""
        if dtype is None:
            dtype = self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype
        return UOp(Ops.LOAD, dtype, (self, *alt))

    def store(self, value: UOp | Any) -> UOp:
        if not isinstance(value, UOp):
            value = UOp.const(value, self.ptrdtype.base)
        return UOp(Ops.STORE, dtypes.void, (self, value))

    def after(self, *deps: UOp) -> UOp:
        """This value, ordered after `deps`; with no deps it is the value itself."""
        if not deps:
            return self
        return UOp(Ops.AFTER, self.dtype, (self, *deps))

    def call_with_output(self, *arguments: UOp, grad_fxn: Any = None, precompile: bool = False) -> UOp:
        """This body (a graph over PARAM 0..m-1) applied to the m `arguments` as a call with one output buffer; the
        output, `AFTER(buffer, CALL)` (tg.codegen.schedule.calls)."""
        from tg.codegen.schedule.calls import call_with_outputs

        return call_with_outputs((self,), *arguments, grad_fxn=grad_fxn, precompile=precompile)[0]

    @staticmethod
    def call_with_outputs(
        bodies: tuple[UOp, ...], *arguments: UOp, grad_fxn: Any = None, precompile: bool = False
    ) -> tuple[UOp, ...]:
        """The `bodies` applied to `arguments` as one call with an output buffer per body; the outputs."""
        from tg.codegen.schedule.calls import call_with_outputs

        return call_with_outputs(bodies, *arguments, grad_fxn=grad_fxn, precompile=precompile)

    @property
    def unbound_outputs(self) -> tuple[UOp, ...]:
        """A void CALL's outputs: each argument its body stores into, after the call."""
        from tg.codegen.schedule.calls import unbound_outputs

        return unbound_outputs(self)

    def end(self, *ranges: UOp) -> UOp:
        """Close `ranges` after this node."""
        if not ranges:
            return self
        return UOp(Ops.END, dtypes.void, (self, *ranges))

    def reduce(self, *ranges: UOp, arg: Ops = Ops.ADD) -> UOp:
        """Reduce this value over `ranges` with `arg` (ADD, MUL or MAX)."""
        if not ranges:
            return self
        return UOp(Ops.REDUCE, self.dtype, (self, *ranges), arg)

    # -------------------------------------------------------------------------------- ALU builders

    def alu(self, op: Ops, *srcs: UOp) -> UOp:
        if op in GroupOp.Comparison:
            dtype = dtypes.bool.vec(self.dtype.count)
        elif op is Ops.WHERE:
            dtype = srcs[0].dtype
        else:
            dtype = self.dtype
        return UOp(op, dtype, (self, *srcs))

    def _operand(self, x: Any) -> UOp:
        """`x` as a node; a Python number takes this node's dtype (an address's element dtype: `A[i] * 2`)."""
        if isinstance(x, UOp):
            return x
        return UOp.const(x, self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype)

    def _binop(self, op: Ops, x: Any, reverse: bool = False) -> UOp:
        other = self._operand(x)
        return other.alu(op, self) if reverse else self.alu(op, other)

    def __add__(self, x: Any) -> UOp:
        return self._binop(Ops.ADD, x)

    def __radd__(self, x: Any) -> UOp:
        return self._binop(Ops.ADD, x, True)

    def __mul__(self, x: Any) -> UOp:
        return self._binop(Ops.MUL, x)

    def __rmul__(self, x: Any) -> UOp:
        return self._binop(Ops.MUL, x, True)

    def __neg__(self) -> UOp:
        if self.dtype.scalar() is dtypes.bool:
            return self.logical_not()
        if self.op is Ops.CONST:  # negating a constant needs no node
            return self.const_like(-self.arg)
        return self * -1

    def __sub__(self, x: Any) -> UOp:
        return self + (-self._operand(x))

    def __rsub__(self, x: Any) -> UOp:
        return self._operand(x) + (-self)

    def __floordiv__(self, x: Any) -> UOp:
        """Integer division truncating toward zero (C semantics)."""
        return self._binop(Ops.IDIV, x)

    def __rfloordiv__(self, x: Any) -> UOp:
        return self._binop(Ops.IDIV, x, True)

    def __mod__(self, x: Any) -> UOp:
        """Remainder of truncating division: it has the sign of the dividend (C semantics)."""
        return self._binop(Ops.MOD, x)

    def __rmod__(self, x: Any) -> UOp:
        return self._binop(Ops.MOD, x, True)

    def __truediv__(self, x: Any) -> UOp:
        return self * self._operand(x).reciprocal()

    def __rtruediv__(self, x: Any) -> UOp:
        return self._operand(x) * self.reciprocal()

    def __lt__(self, x: Any) -> UOp:
        return self._binop(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> UOp:
        return self._binop(Ops.CMPLT, x, True)

    def __le__(self, x: Any) -> UOp:
        return self._binop(Ops.CMPLT, x, True).logical_not()

    def __ge__(self, x: Any) -> UOp:
        return self._binop(Ops.CMPLT, x).logical_not()

    def __and__(self, x: Any) -> UOp:
        return self._binop(Ops.AND, x)

    def __rand__(self, x: Any) -> UOp:
        return self._binop(Ops.AND, x, True)

    def __or__(self, x: Any) -> UOp:
        return self._binop(Ops.OR, x)

    def __ror__(self, x: Any) -> UOp:
        return self._binop(Ops.OR, x, True)

    def __xor__(self, x: Any) -> UOp:
        return self._binop(Ops.XOR, x)

    def __rxor__(self, x: Any) -> UOp:
        return self._binop(Ops.XOR, x, True)

    def __lshift__(self, x: Any) -> UOp:
        return self._binop(Ops.SHL, x)

    def __rshift__(self, x: Any) -> UOp:
        return self._binop(Ops.SHR, x)

    def __invert__(self) -> UOp:
        if self.dtype.scalar() is dtypes.bool:
            return self.logical_not()
        return self ^ -1

    # identity equality is what hash-consing gives; value comparisons are .eq/.ne
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def ne(self, x: Any) -> UOp:
        return self._binop(Ops.CMPNE, x)

    def eq(self, x: Any) -> UOp:
        return self._binop(Ops.CMPEQ, x)

    def logical_not(self) -> UOp:
        return self.ne(True)

    def where(self, x: Any, y: Any) -> UOp:
        """`x` where this bool is true, else `y`."""
        if isinstance(x, UOp):
            y = x._operand(y)
        elif isinstance(y, UOp):
            x = y._operand(x)
        else:
            x, y = UOp.const(x, dtypes.index), UOp.const(y, dtypes.index)
        return UOp(Ops.WHERE, x.dtype, (self, x, y))

    def maximum(self, x: Any) -> UOp:
        return self._binop(Ops.MAX, x)

    def minimum(self, x: Any) -> UOp:
        """min(a, b) as -max(-a, -b), so that the MAX rules and bounds serve both."""
        return -((-self).maximum(-self._operand(x)))

    def cast(self, dtype: DType) -> UOp:
        if self.dtype is dtype:
            return self
        return UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        return UOp(Ops.BITCAST, dtype, (self,))

    def trunc(self) -> UOp:
        return self.alu(Ops.TRUNC)

    def sqrt(self) -> UOp:
        return self.alu(Ops.SQRT)

    def exp2(self) -> UOp:
        return self.alu(Ops.EXP2)

    def log2(self) -> UOp:
        return self.alu(Ops.LOG2)

    def sin(self) -> UOp:
        return self.alu(Ops.SIN)

    def reciprocal(self) -> UOp:
        return self.alu(Ops.RECIPROCAL)


def _same(a: tuple, b: tuple) -> bool:
    """Element-wise identity of two tuples of UOps (tuple == would do the same, this says why)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


_PLAIN_OPERANDS = (int, float, bool)


def _defer_to_tensors(method: Callable[[UOp, Any], UOp]) -> Callable[[UOp, Any], Any]:
    """`n - t` for a symbolic int n and a Tensor t is the Tensor's reflected operator (a Tensor value), not a UOp."""

    @functools.wraps(method)
    def operator(self: UOp, x: Any) -> Any:
        if type(x) not in _PLAIN_OPERANDS and not isinstance(x, UOp) and hasattr(x, "uop"):
            return NotImplemented
        return method(self, x)

    return operator


_DEFERRING = ("add", "radd", "sub", "rsub", "mul", "rmul", "floordiv", "rfloordiv", "mod", "rmod", "truediv",
              "rtruediv", "lt", "gt", "le", "ge")  # fmt: skip
for _name in _DEFERRING:
    setattr(UOp, f"__{_name}__", _defer_to_tensors(getattr(UOp, f"__{_name}__")))


def Variable(name: str, vmin: int, vmax: int, dtype: DType = dtypes.index) -> UOp:  # noqa: N802 - older spelling
    return UOp.variable(name, vmin, vmax, dtype)


def sym_infer(uop: UOp | int, var_values: dict[str, int]) -> Any:
    """The value of an expression given each variable's value by name (BINDs use their bound value)."""
    from tg.codegen.uop.alu import exec_alu

    if not isinstance(uop, UOp):
        return uop
    values: dict[UOp, Any] = {}
    for node in uop.toposort(lambda u: u.op is not Ops.BIND):
        if node.op is Ops.CONST:
            values[node] = node.arg
        elif node.op is Ops.DEFINE_VAR:
            values[node] = var_values[node.arg.name]
        elif node.op is Ops.BIND:
            values[node] = var_values.get(node.src[0].arg.name, node.src[1].arg)  # its sources are not visited
        elif node.op is Ops.CAST:
            values[node] = truncate(values[node.src[0]], node.dtype)
        elif node.op in GroupOp.ALU:
            values[node] = exec_alu(node.op, node.dtype, tuple(values[s] for s in node.src))
        else:
            raise ValueError(f"sym_infer cannot evaluate {node.op!r}")
    return values[uop]
