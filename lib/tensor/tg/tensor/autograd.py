"""Reverse-mode autodiff as a rewrite of the tensor graph.

Every Tensor op is built from a few primitive tensor-graph ops (ALU, CAST, REDUCE_AXIS, movement ops, ...), so a
gradient rule per primitive gives every Tensor op its gradient. `compute_gradient` walks the graph from the root
back to the targets in reverse topological order; for each node it asks the rule in `GRADIENT_RULES` for the
gradient of each source and adds it to that source's total. The results are new lazy UOps over the forward
nodes: realizing them fuses the backward with whatever of the forward it needs, like any other graph.

A composite op may give its own rule instead (`custom_gradient`): conv2d does, because the gradients of its
primitives make slow kernels (tg.tensor.conv_backward).

Conventions at kinks follow torch (spec tensor.md Appendix B): the rules here are exact derivatives of the
primitives, and the Tensor ops choose their `where` branches so that relu'(0) = 0, abs'(0) = 0, ties of max split
the gradient evenly, clamp passes it at its bounds.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from contextlib import ContextDecorator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from tg.codegen import Ops, UOp, dtypes
from tg.codegen.schedule.graph import ReduceArg, Shape, ShapeError, device_node, device_of, shape_of
from tg.codegen.uop.ops import GroupOp
from tg.hcq.engine.capture import is_capturing
from tg.tensor.base import TensorBase, as_tensor
from tg.tensor.creation import const_of_shape
from tg.tensor.errors import CustomKernelError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

Gradients = tuple[UOp | None, ...]


# -------------------------------------------------------------------------------- small graph builders


def _const(value: float | bool, like: UOp) -> UOp:
    """A constant of `like`'s dtype, shape and device."""
    return const_of_shape(value, shape_of(like), like.dtype, device_of(like))


def _alu(op: Ops, *sources: UOp) -> UOp:
    dtype = dtypes.bool if op in GroupOp.Comparison else sources[-1].dtype
    return UOp(op, dtype, sources)


def _mul(a: UOp, b: UOp) -> UOp:
    return _alu(Ops.MUL, a, b)


def _where(condition: UOp, a: UOp, b: UOp) -> UOp:
    return _alu(Ops.WHERE, condition, a, b)


def _zeros_like(node: UOp) -> UOp:
    return _const(0.0, node)


def _sum_to_shape(grad: UOp, shape: Shape) -> UOp:
    """`grad` summed over the axes where `shape` has size 1 and grad does not (undoes an EXPAND)."""
    axes = tuple(i for i, (have, want) in enumerate(zip(shape_of(grad), shape, strict=True)) if have != want)
    if not axes:
        return grad
    return UOp(Ops.REDUCE_AXIS, grad.dtype, (grad,), ReduceArg(Ops.ADD, axes))


def _expand_to(node: UOp, shape: Shape) -> UOp:
    return node if shape_of(node) == shape else UOp(Ops.EXPAND, node.dtype, (node,), shape)


# -------------------------------------------------------------------------------- the rules


def _max_gradients(grad: UOp, node: UOp) -> Gradients:
    """Binary MAX: the larger source takes the gradient; equal sources split it evenly (as torch's maximum)."""
    a, b = node.src
    half = _mul(grad, _const(0.5, grad))
    zero = _zeros_like(grad)
    tie = _alu(Ops.CMPEQ, a, b)
    return (
        _where(_alu(Ops.CMPLT, b, a), grad, _where(tie, half, zero)),
        _where(_alu(Ops.CMPLT, a, b), grad, _where(tie, half, zero)),
    )


def _pow_gradients(grad: UOp, node: UOp) -> Gradients:
    """d(a**b)/da = b * a**(b-1) (0 where b == 0); d(a**b)/db = a**b * ln(a) (0 where a == 0 and b >= 0)."""
    base, exponent = node.src
    zero = _zeros_like(node)
    base_power = _alu(Ops.POW, base, _alu(Ops.SUB, exponent, _const(1.0, exponent)))
    d_base = _where(_alu(Ops.CMPEQ, exponent, zero), zero, _mul(exponent, base_power))
    log_base = _mul(_alu(Ops.LOG2, base), _const(math.log(2), base))
    base_is_zero = _alu(Ops.CMPEQ, base, zero)
    exponent_negative = _alu(Ops.CMPLT, exponent, zero)
    no_log = _alu(Ops.AND, base_is_zero, _alu(Ops.CMPEQ, exponent_negative, _const(False, exponent_negative)))
    d_exponent = _where(no_log, zero, _mul(node, log_base))
    return _mul(grad, d_base), _mul(grad, d_exponent)


def _gather_source_gradient(grad: UOp, node: UOp) -> UOp:
    from tg.tensor.gather_scatter import gather_source_gradient  # (a Tensor-level scatter: imports the Tensor)

    return gather_source_gradient(grad, node)


def _cos(x: UOp) -> UOp:
    """cos(x) = 1 - 2 sin(x/2)^2 (as Tensor.cos: no rounding error from pi/2 - x)."""
    half_sine = _alu(Ops.SIN, _mul(x, _const(0.5, x)))
    return _alu(Ops.SUB, _const(1.0, x), _mul(_const(2.0, x), _mul(half_sine, half_sine)))


def _reduce_gradients(grad: UOp, node: UOp) -> Gradients:
    source = node.src[0]
    shape = shape_of(source)
    op = node.arg.op
    if op is Ops.ADD:
        return (_expand_to(grad, shape),)
    if op is Ops.MAX:  # ties share the gradient evenly (as torch's max over all elements)
        is_max = _alu(Ops.CMPEQ, source, _expand_to(node, shape))
        ones = _where(is_max, _const(1.0, source), _zeros_like(source))
        count = UOp(Ops.REDUCE_AXIS, source.dtype, (ones,), ReduceArg(Ops.ADD, node.arg.axes))
        share = _alu(Ops.FDIV, grad, count)
        return (_mul(ones, _expand_to(share, shape)),)
    return (_mul(_expand_to(grad, shape), _product_of_the_others(source, node)),)


def _product_of_the_others(source: UOp, node: UOp) -> UOp:
    """d(prod)/dx_i: the product of the other elements (torch's value). prod / x_i where x_i is not zero; at a zero,
    the product of the non-zero elements when it is the only zero, else 0 (prod / x_i would be 0/0 there)."""
    shape, axes = shape_of(source), node.arg.axes
    zero, one = _zeros_like(source), _const(1.0, source)
    is_zero = _alu(Ops.CMPEQ, source, zero)
    zero_count = UOp(Ops.REDUCE_AXIS, source.dtype, (_where(is_zero, one, zero),), ReduceArg(Ops.ADD, axes))
    nonzero_product = UOp(Ops.REDUCE_AXIS, source.dtype, (_where(is_zero, one, source),), ReduceArg(Ops.MUL, axes))
    only_zero = _alu(Ops.CMPEQ, _expand_to(zero_count, shape), one)
    at_a_zero = _where(only_zero, _expand_to(nonzero_product, shape), zero)
    elsewhere = _alu(Ops.FDIV, _expand_to(node, shape), _where(is_zero, one, source))
    return _where(is_zero, at_a_zero, elsewhere)


def _inverse_permutation(order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(order)), key=lambda i: order[i]))


def _call_gradients(grad: UOp, node: UOp) -> Gradients:
    """A value CALL (Tensor.call): its grad_fxn's answer, else autograd of its body with the arguments in place of
    the placeholders."""
    from tg.codegen.schedule.calls import grad_fxn_of, inline_value_calls

    if grad_fxn_of(node) is not None:
        return (None, *grad_fxn_gradients(grad, node))
    return (None, *_body_gradients(inline_value_calls(node), grad, node.src[1:]))


def _body_gradients(value: UOp, grad: UOp, arguments: tuple[UOp, ...]) -> Gradients:
    """d(value)/d(argument) for each of a call's arguments, `value` being a result of the call inlined (an argument
    passed twice gets the whole gradient once)."""
    grads = compute_gradient(value, grad, set(arguments))
    first = {argument: k for k, argument in reversed(list(enumerate(arguments)))}
    return tuple(grads.get(a) if first[a] == k else None for k, a in enumerate(arguments))


def _output_gradients(grad: UOp, output: UOp) -> Gradients:
    """An output of a call, `AFTER(buffer, CALL)`: the gradient of each of the call's arguments, by its grad_fxn, or by
    autograd of the body where a call with outputs has none (a custom kernel without one has no gradient)."""
    from tg.codegen.schedule.calls import grad_fxn_of, is_output_call, output_value

    call = output.src[1]
    if grad_fxn_of(call) is None and is_output_call(call):
        return _body_gradients(output_value(output.src[0], call), grad, call.src[1:])
    return grad_fxn_gradients(grad, call)


def _no_gradient(grad: UOp, node: UOp) -> Gradients:
    return (None,) * len(node.src)


_LN2 = math.log(2)

GRADIENT_RULES: dict[Ops, Callable[[UOp, UOp], Gradients]] = {
    Ops.ADD: lambda g, n: (g, g),
    Ops.SUB: lambda g, n: (g, _alu(Ops.NEG, g)),
    Ops.MUL: lambda g, n: (_mul(g, n.src[1]), _mul(g, n.src[0])),
    Ops.FDIV: lambda g, n: (_alu(Ops.FDIV, g, n.src[1]), _alu(Ops.NEG, _alu(Ops.FDIV, _mul(g, n), n.src[1]))),
    Ops.NEG: lambda g, n: (_alu(Ops.NEG, g),),
    Ops.RECIPROCAL: lambda g, n: (_alu(Ops.NEG, _mul(g, _mul(n, n))),),
    Ops.SQRT: lambda g, n: (_alu(Ops.FDIV, g, _mul(n, _const(2.0, n))),),
    Ops.EXP2: lambda g, n: (_mul(g, _mul(n, _const(_LN2, n))),),
    Ops.LOG2: lambda g, n: (_alu(Ops.FDIV, g, _mul(n.src[0], _const(_LN2, n))),),
    Ops.SIN: lambda g, n: (_mul(g, _cos(n.src[0])),),
    Ops.MAX: _max_gradients,
    Ops.POW: _pow_gradients,
    Ops.MULACC: lambda g, n: (_mul(g, n.src[1]), _mul(g, n.src[0]), g),
    Ops.WHERE: lambda g, n: (None, _where(n.src[0], g, _zeros_like(g)), _where(n.src[0], _zeros_like(g), g)),
    Ops.CAST: lambda g, n: (UOp(Ops.CAST, n.src[0].dtype, (g,)) if dtypes.is_float(n.src[0].dtype) else None,),
    Ops.REDUCE_AXIS: _reduce_gradients,
    Ops.RESHAPE: lambda g, n: (UOp(Ops.RESHAPE, g.dtype, (g,), shape_of(n.src[0])),),
    Ops.PERMUTE: lambda g, n: (UOp(Ops.PERMUTE, g.dtype, (g,), _inverse_permutation(n.arg)),),
    Ops.EXPAND: lambda g, n: (_sum_to_shape(g, shape_of(n.src[0])),),
    Ops.PAD: lambda g, n: (
        UOp(Ops.SHRINK, g.dtype, (g,), tuple((b, b + s) for (b, _), s in zip(n.arg, shape_of(n.src[0]), strict=True))),
    ),
    Ops.SHRINK: lambda g, n: (
        UOp(
            Ops.PAD, g.dtype, (g,), tuple((s, size - e) for (s, e), size in zip(n.arg, shape_of(n.src[0]), strict=True))
        ),
    ),
    Ops.FLIP: lambda g, n: (UOp(Ops.FLIP, g.dtype, (g,), n.arg),),
    Ops.CONTIGUOUS: lambda g, n: (g,),
    Ops.ASSIGN: lambda g, n: (None, g),  # the result reads back the value written (clone is an assign)
    Ops.COPY: lambda g, n: (UOp(Ops.COPY, g.dtype, (g, device_node(device_of(n.src[0])))), None),
    Ops.GATHER: lambda g, n: (_gather_source_gradient(g, n), *(None for _ in n.src[1:])),
    Ops.CALL: _call_gradients,
}
# primitives whose result is piecewise constant, not a float, or cut off from autograd on purpose
for _op in (
    Ops.TRUNC, Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR,
    Ops.BITCAST, Ops.DETACH,
):  # fmt: skip
    GRADIENT_RULES[_op] = _no_gradient


# -------------------------------------------------------------------------------- the walk


def _nodes_between(root: UOp, targets: set[UOp]) -> list[UOp]:
    """The nodes of root's graph that depend on a target, in topological order (sources first)."""
    order = root.toposort(lambda node: node.op is not Ops.DETACH)
    on_path: set[UOp] = set()
    for node in order:
        if node in targets or any(source in on_path for source in node.src):
            on_path.add(node)
    return [node for node in order if node in on_path]


@dataclass(frozen=True)
class CustomGradient:
    """A composite op's own gradient rule: `rule(grad, wanted)` gives d(node)/d(source), weighted by grad, for each
    of `sources` (inputs the node's value is a function of, usually ancestors several primitives up) where
    `wanted` is True, None elsewhere."""

    sources: tuple[UOp, ...]
    rule: Callable[[UOp, tuple[bool, ...]], Gradients]


# node -> its own rule, while the node lives. The rule replaces the primitives' rules for gradient that flows
# through this node only: a primitive inside the composite that is also used elsewhere still passes the gradient
# it gets from there, so the total stays exact.
_custom_gradients: weakref.WeakKeyDictionary[UOp, CustomGradient] = weakref.WeakKeyDictionary()


def custom_gradient(node: UOp, sources: tuple[UOp, ...], rule: Callable[[UOp, tuple[bool, ...]], Gradients]) -> None:
    """Differentiate `node` with `rule` instead of through the primitives that compute it (see CustomGradient)."""
    _custom_gradients[node] = CustomGradient(sources, rule)


def grad_fxn_gradients(grad: UOp, call: UOp) -> Gradients:
    """`grad_fxn(grad, call)`, the call's grad_fxn, as one UOp (or None) per argument `call.src[1:]`, checked."""
    from tg.codegen.schedule.calls import grad_fxn_of
    from tg.tensor.tensor import Tensor

    sources = call.src[1:]
    grad_fxn = grad_fxn_of(call)
    if grad_fxn is None:
        raise CustomKernelError("no gradient through a custom kernel without grad_fxn: pass grad_fxn=")
    grads = grad_fxn(grad, call)
    grads = (grads,) if isinstance(grads, (UOp, Tensor)) else tuple(grads)
    if len(grads) != len(sources):
        raise CustomKernelError(f"grad_fxn returned {len(grads)} gradients for {len(sources)} inputs")
    result: list[UOp | None] = []
    for k, (answer, source) in enumerate(zip(grads, sources, strict=True)):
        node = answer.uop if isinstance(answer, Tensor) else answer
        if node is not None and shape_of(node) != shape_of(source):
            raise ShapeError(f"grad_fxn's gradient {k} has shape {shape_of(node)}, its input {shape_of(source)}")
        if node is not None and node.dtype is not source.dtype:
            node = UOp(Ops.CAST, source.dtype, (node,))
        result.append(node)
    return tuple(result)


def _source_gradients(node: UOp, grad: UOp, on_path: set[UOp]) -> Iterable[tuple[UOp, UOp | None]]:
    """(source, its gradient) pairs of one node: its own rule if it has one, else its primitive's rule. An output of
    a custom kernel, `AFTER(input, CALL)`, passes the gradient to every input of the kernel by its grad_fxn."""
    custom = _custom_gradients.get(node)
    if custom is not None:
        wanted = tuple(source in on_path and dtypes.is_float(source.dtype) for source in custom.sources)
        return zip(custom.sources, custom.rule(grad, wanted), strict=True)
    if node.op is Ops.AFTER and node.src[1].op is Ops.CALL:
        return zip(node.src[1].src[1:], _output_gradients(grad, node), strict=True)
    rule = GRADIENT_RULES.get(node.op)
    if rule is None:
        if node.op in (Ops.BUFFER, Ops.CONST):
            return ()
        raise NotImplementedError(f"no gradient rule for {node.op!r}")
    return zip(node.src, rule(grad, node), strict=True)


def compute_gradient(root: UOp, root_gradient: UOp, targets: Iterable[UOp]) -> dict[UOp, UOp]:
    """d(root)/d(target), weighted by `root_gradient`, for each target that root depends on through floats."""
    targets = set(targets)
    totals: dict[UOp, UOp] = {root: root_gradient}
    path = _nodes_between(root, targets)
    on_path = set(path)
    for node in reversed(path):
        grad = totals.get(node)
        if grad is None:
            continue
        for source, source_grad in _source_gradients(node, grad, on_path):
            if source_grad is None or not dtypes.is_float(source.dtype):
                continue
            previous = totals.get(source)
            totals[source] = source_grad if previous is None else _alu(Ops.ADD, previous, source_grad)
    return {target: totals[target] for target in targets if target in totals}


def unit_gradient(node: UOp) -> UOp:
    """The default gradient of a scalar root: 1 of its dtype, shape and device."""
    return _const(1.0, node)


# -------------------------------------------------------------------------------- the Tensor side

# live tensors with requires_grad=True, by id (a WeakSet would compare tensors with ==, which builds a tensor)
_tensors_requiring_grad: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


# realized node -> the graph it was computed from, while the realized node lives (so that a loss realized before
# backward(), or a graph built on a realized intermediate, can still be differentiated). Not inside a TinyJit
# capture while no live tensor requires grad: the capture keeps the nodes it realized for good (its buffers), which
# would hold every graph they came from resident (an LLM decode step: tens of MB of UOps), and without a tensor
# that requires grad, nothing inside a captured step is differentiated
_computed_from: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def remember_former_uop(tensor: Tensor, node: UOp, realized: UOp) -> None:
    """Note that `tensor` was `node` before it was realized into `realized`: graphs built earlier still hold node,
    and a gradient asked for the tensor must be found there (held weakly: forgotten once no graph holds node)."""
    former = [ref for ref in getattr(tensor, "_former_uops", ()) if ref() is not None]
    tensor._former_uops = [*former, weakref.ref(node)]
    # an assign's result is new state, not a value to differentiate through
    if node.op is not Ops.ASSIGN and (len(_tensors_requiring_grad) > 0 or not is_capturing()):
        _computed_from[realized] = node


def forget_computed_from(node: UOp) -> None:
    """Make the realized `node` a leaf for autograd: gradients no longer flow back through the graph that computed
    it (TinyJit's inputs: a replay swaps their buffers, so reading that graph would bake the first inputs in)."""
    _computed_from.pop(node, None)


def _with_graphs_restored(root: UOp, keep: set[UOp], inside: frozenset[UOp] = frozenset()) -> UOp:
    """root with every realized node (except those in keep) replaced by the graph that computed it. A node is not
    restored inside its own graph: a custom kernel's output is the buffer it wrote, which its graph reads as the
    buffer's contents before the kernel."""
    mapping = {}
    for node in root.toposort():
        former = _computed_from.get(node)
        if former is not None and node not in keep and node not in inside:
            mapping[node] = _with_graphs_restored(former, keep, inside | {node})
    return root.substitute(mapping) if mapping else root


def _nodes_of(tensor: Tensor) -> list[UOp]:
    """The tensor's node and the nodes it had before it was realized (newest first)."""
    former = [ref() for ref in reversed(getattr(tensor, "_former_uops", ()))]
    return [tensor.uop, *(node for node in former if node is not None)]


def _node_in(tensor: Tensor, graph: set[UOp]) -> UOp | None:
    return next((node for node in _nodes_of(tensor) if node in graph), None)


class _ClassFlag(ContextDecorator):
    """Set a class attribute of Tensor for the duration of a `with` block (or a decorated function)."""

    def __init__(self, owner: type, name: str, value: bool) -> None:
        self.owner, self.name, self.value = owner, name, value
        self.saved: list[bool] = []

    def __enter__(self) -> _ClassFlag:
        self.saved.append(getattr(self.owner, self.name))
        setattr(self.owner, self.name, self.value)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self.owner, self.name, self.saved.pop())


class AutogradOps(TensorBase):
    """`requires_grad`, `grad`, `backward`, `gradient`, and the `train`/`test`/`no_grad` modes.

    `backward()` fills `.grad` of every live tensor with `requires_grad=True` that the loss depends on (optimizers
    set it on their parameters). Tensors with `requires_grad` None or False get no `.grad`. Under
    `Tensor.no_grad = True` (or `with tg.tensor.no_grad():`), computed results are cut off from autograd.
    """

    # (`training`, the flag BatchNorm and dropout read, lives with dropout in tg.tensor.random)
    no_grad: ClassVar[bool] = False

    @property
    def requires_grad(self) -> bool | None:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        self._requires_grad = value
        if value:
            _tensors_requiring_grad[id(self)] = as_tensor(self)
        else:
            _tensors_requiring_grad.pop(id(self), None)

    def requires_grad_(self, value: bool = True) -> Tensor:
        self.requires_grad = value
        return as_tensor(self)

    @classmethod
    def train(cls, mode: bool = True) -> _ClassFlag:
        """`with Tensor.train():` (or as a decorator) runs in training mode; `Tensor.train(False)` in eval mode."""
        return _ClassFlag(cls, "training", mode)

    @classmethod
    def test(cls) -> _ClassFlag:
        return _ClassFlag(cls, "training", False)

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target (weighted by `gradient`, which a non-scalar self needs)."""
        if not dtypes.is_float(self.dtype):
            raise RuntimeError(f"only float Tensors have gradient, this one is {self.dtype!r}")
        if gradient is None:
            if self.shape != ():
                raise RuntimeError(f"gradient of a non-scalar tensor (shape {self.shape}) needs gradient=")
            root_gradient = unit_gradient(self.uop)
        else:
            if tuple(gradient.shape) != tuple(self.shape):
                raise ValueError(f"gradient= has shape {gradient.shape}, the tensor has shape {self.shape}")
            root_gradient = gradient.cast(self.dtype).uop
        # the gradient flows through realized intermediates too (h = (x * 3).realize(); h * x depends on x twice),
        # so their graphs are always put back, not only when a target is hidden behind one
        root = _with_graphs_restored(self.uop, {target.uop for target in targets})
        graph = set(root.toposort())
        nodes = []
        for target in targets:
            node = _node_in(target, graph)
            if node is None:
                raise RuntimeError(f"{target!r} is not in the graph of {self!r}")
            nodes.append(node)
        found = compute_gradient(root, root_gradient, nodes)
        # a node reached only through comparisons or other piecewise-constant ops has gradient zero
        return [target._wrap(found.get(node, _const(0.0, node))) for target, node in zip(targets, nodes, strict=True)]

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Add d(self)/d(t) to `t.grad` for every live tensor t with requires_grad=True that self depends on."""
        candidates = list(_tensors_requiring_grad.values())
        graph_root = _with_graphs_restored(self.uop, {t.uop for t in candidates})
        graph = set(graph_root.toposort(lambda node: node.op is not Ops.DETACH))
        targets = [t for t in candidates if dtypes.is_float(t.dtype) and _node_in(t, graph) is not None]
        if not targets:
            return as_tensor(self)
        for target, grad in zip(targets, self.gradient(*targets, gradient=gradient), strict=True):
            target.grad = grad if target.grad is None else target.grad + grad
        return as_tensor(self)


def no_grad() -> _ClassFlag:
    """`with no_grad():` computes results that autograd never differentiates (as torch.no_grad)."""
    from tg.tensor.tensor import Tensor

    return _ClassFlag(Tensor, "no_grad", True)
