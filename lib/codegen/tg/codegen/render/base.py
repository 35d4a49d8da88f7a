"""The renderer base: one walker over a linear program, and the hooks a language fills in.

A linear program (see tg.codegen.lower) is a flat list: RANGE opens a loop, END closes it, every other node
computes one value from earlier ones. `LinearRenderer.render` walks that list once and asks the language how to
spell each piece:

    op spellings   `code_for_op`: ALU op -> a function of the operand texts (and dtypes) giving an expression
    values         `declare`: one statement binding a new local to an expression
    memory         `index`, `load`, `store`, `accumulator`: buffer elements and register arrays
    loops          `open_loop`, `close_loop`
    conversions    `literal`, `cast`, `bitcast`
    the ABI        `signature_and_prologue` and `finish`: how buffers arrive and how the function is wrapped
                   (the CPU's `core_id` convention, a GPU's thread ids)

A language is a subclass that fills these in (tg.codegen.render.c, tg.codegen.render.python); a C-style GPU
language only overrides the ABI hooks of `CStyleLanguage`. What an op computes at its edges (division by zero,
out-of-range shifts, NaN in max) is defined once, in tg.codegen.uop.alu.EDGE_CASES, and every language must
reproduce it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tg.codegen.dtype import AddrSpace, DType
from tg.codegen.target import Target
from tg.codegen.uop.ops import GroupOp, Ops, UOp


@dataclass(frozen=True)
class RenderedKernel:
    """Source for one kernel: the function `name`, launched with `global_size` (on CPU: the number of calls,
    each with its own core_id), taking the buffers in PARAM slot order."""

    name: str
    src: str
    global_size: tuple[Any, Any, Any] = (1, 1, 1)  # ints, or index UOps of the kernel's variables


class Renderer:
    """Turns a LINEAR program into source for the machine `target` describes (tg.codegen.target; the device in
    tg.hcq builds it). `device` names the device family it renders for; the class fields below declare what the
    language can do, and `Target.of` copies them into a Target."""

    device: str = ""
    has_local: bool = False  # work-groups and their ids: LOCAL and GROUP opts are legal (the GPU languages)
    core_groups: bool = False  # a GROUP opt becomes calls on several cores that combine their partials (C)
    shared_max: int = 0  # bytes of local (shared) memory a work-group may use (0: none)
    local_threads: int = 0  # threads per work-group the heuristics give a kernel (a GPU's LOCAL opt; 0: none)
    # float32 exp2/log2 reach the renderer as plain float ops (tg.codegen.lower.transcendental) rather than EXP2/LOG2:
    # the CPU renderers, whose libm calls would be scalar, and PYTHON, which must compute the same bits
    software_transcendentals: bool = False
    has_prefetch: bool = False  # PREFETCH nodes become prefetch instructions (C); elsewhere they may be dropped

    def __init__(self, target: Target | None = None) -> None:
        self.target = Target.of(type(self)) if target is None else target

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling (process-replay captures): a renderer pickled before Targets existed kept its machine as the
        attributes `cores` and `max_lanes`; they become its Target, so `tg-replay diff` replays older captures."""
        if "target" not in state:
            machine = {name: state.pop(name) for name in ("cores", "max_lanes") if name in state}
            state["target"] = Target.of(type(self), **machine)
        self.__dict__.update(state)

    @classmethod
    def for_machine(cls, **machine: Any) -> Renderer:
        """This renderer for a machine given by Target fields (`CRenderer.for_machine(cores=2)`), its declared
        capabilities filled in."""
        return cls(Target.of(cls, **machine))

    def render(self, linear: UOp, target: Target | None = None) -> RenderedKernel:
        """The source of `linear` for `target` (this renderer's own when None: a one-call variant of it, say)."""
        raise NotImplementedError


@dataclass
class KernelText:
    """The state of one render: what each linear node is called, and the lines written so far."""

    linear: UOp
    indent: str
    target: Target  # the machine this render is for
    names: dict[UOp, str] = field(default_factory=dict)  # linear node -> the expression holding its value
    gates: dict[UOp, str] = field(default_factory=dict)  # gated INDEX -> its gate expression
    lines: list[str] = field(default_factory=list)
    depth: int = 1
    counter: int = 0
    loop_starts: list[int] = field(default_factory=list)  # len(lines) when each open loop began
    abi: dict[str, Any] = field(default_factory=dict)  # what the language's ABI hooks remember during a render

    @property
    def name(self) -> str:
        return self.linear.arg.function_name

    def line(self, text: str) -> None:
        self.lines.append(self.indent * self.depth + text)

    def fresh(self, prefix: str = "v") -> str:
        name = f"{prefix}{self.counter}"
        self.counter += 1
        return name


# An op spelling: (dtype of the result, dtype of the operands, operand texts) -> expression text
Spelling = Callable[[DType, DType, list[str]], str]


class LinearRenderer(Renderer):
    """Walks a linear program in order; subclasses say how each node is written (see the module docstring)."""

    indent: str = "  "
    code_for_op: dict[Ops, Spelling] = {}

    def render(self, linear: UOp, target: Target | None = None) -> RenderedKernel:
        k = KernelText(linear, self.indent, self.target if target is None else target)
        params = global_params(linear)
        for p in params:
            k.names[p] = self.buffer_name(p)
        self.prologue(k, params)
        for node in linear.src:
            self.render_node(k, node)
        return self.finish(k, params)

    # ------------------------------------------------------------------------------------------- the walker
    def render_node(self, k: KernelText, node: UOp) -> None:
        op = node.op
        operands = [k.names.get(s, "") for s in node.src]
        if op is Ops.PARAM:
            if node.addrspace is AddrSpace.REG:
                k.names[node] = f"acc{node.arg.slot}"
                self.accumulator(k, node, k.names[node])
        elif op is Ops.CONST:
            k.names[node] = self.literal(node.arg, node.dtype)
        elif op is Ops.DEFINE_VAR:  # a runtime int argument of the kernel (see kernel_variables)
            k.names[node] = variable_argument(node)
        elif op is Ops.SPECIAL:  # a hardware index: the CPU's core_id (tg.codegen.lower.multicore)
            self.declare(k, node, self.hardware_index(node))
        elif op is Ops.AFTER:
            k.names[node] = operands[0]
        elif op is Ops.INDEX:
            k.names[node] = self.index_of(k, node, operands)
            if len(node.src) > 2:
                k.gates[node] = operands[2]
        elif op is Ops.LOAD:
            self.declare(k, node, self.load(node, operands[0], k.gates.get(node.src[0]), operands[1:]))
        elif op is Ops.STORE:
            self.store(k, node, operands[0], operands[1], k.gates.get(node.src[0]))
        elif op is Ops.PREFETCH:
            self.prefetch(k, operands[0], k.gates.get(node.src[0]))
        elif op is Ops.RANGE:
            k.names[node] = range_name(node)
            k.loop_starts.append(len(k.lines))
            self.open_loop(k, node, k.names[node])
            k.depth += 1
        elif op is Ops.END:
            k.depth -= 1
            self.close_loop(k, node.src[0], k.names[node.src[0]], k.loop_starts.pop())
        elif op is Ops.CAST:
            self.declare(k, node, self.cast(node.dtype, node.src[0].dtype, operands[0]))
        elif op is Ops.BITCAST:
            self.declare(k, node, self.bitcast(node.dtype, node.src[0].dtype, operands[0]))
        elif op in GroupOp.ALU:
            self.declare(k, node, self.alu(op, node.dtype, operand_dtype(node), operands))
        else:
            raise NotImplementedError(f"the {type(self).__name__} cannot render {op!r}")

    def alu(self, op: Ops, dtype: DType, operands_dtype: DType, operands: list[str]) -> str:
        spelling = self.code_for_op.get(op)
        if spelling is None:
            raise NotImplementedError(f"the {type(self).__name__} cannot render {op!r}")
        return spelling(dtype, operands_dtype, operands)

    # ---------------------------------------------------------------------------------- the language hooks
    def hardware_index(self, node: UOp) -> str:
        """The expression of a SPECIAL (a hardware index such as the CPU's core_id)."""
        raise NotImplementedError(f"the {type(self).__name__} has no hardware index {node.arg!r}")

    def buffer_name(self, param: UOp) -> str:
        return f"data{param.arg.slot}"

    def prologue(self, k: KernelText, params: list[UOp]) -> None:
        """Lines before the program (the ABI: turning raw arguments into buffers)."""

    def finish(self, k: KernelText, params: list[UOp]) -> RenderedKernel:
        """The whole source: the function around `k.lines` (the ABI)."""
        raise NotImplementedError

    def literal(self, value: object, dtype: DType) -> str:
        raise NotImplementedError

    def declare(self, k: KernelText, node: UOp, expression: str) -> None:
        """Bind `expression` to a new local named for `node`."""
        raise NotImplementedError

    def accumulator(self, k: KernelText, node: UOp, name: str) -> None:
        raise NotImplementedError

    def index(self, buffer: str, position: str) -> str:
        return f"{buffer}[{position}]"

    def index_of(self, k: KernelText, node: UOp, operands: list[str]) -> str:
        """The address an INDEX node names (operands: the buffer, the position, maybe a gate)."""
        return self.index(operands[0], operands[1])

    def load(self, node: UOp, address: str, gate: str | None, alternative: list[str]) -> str:
        raise NotImplementedError

    def store(self, k: KernelText, node: UOp, address: str, value: str, gate: str | None) -> None:
        raise NotImplementedError

    def prefetch(self, k: KernelText, address: str, gate: str | None) -> None:
        """Ask for the memory at `address` ahead of its use (where `gate` holds). A hint: a language without
        prefetches writes nothing, and the program computes the same."""

    def open_loop(self, k: KernelText, rng: UOp, name: str) -> None:
        raise NotImplementedError

    def close_loop(self, k: KernelText, rng: UOp, name: str, body_start: int) -> None:
        """Close the loop over `rng`; its body is `k.lines[body_start + 1:]` (a renderer may rewrite it)."""
        raise NotImplementedError

    def cast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        raise NotImplementedError

    def bitcast(self, dtype: DType, source_dtype: DType, x: str) -> str:
        raise NotImplementedError


def operand_dtype(node: UOp) -> DType:
    """The dtype an ALU op computes in: its operands' (the last operand's for WHERE, whose first is the bool)."""
    return node.src[-1].dtype if node.op is Ops.WHERE else node.src[0].dtype


def range_name(rng: UOp) -> str:
    return f"r{rng.arg.axis_id}" if rng.arg.axis_id >= 0 else f"rn{-rng.arg.axis_id}"


def buffer_param(address: UOp) -> UOp:
    """The PARAM an INDEX (or a chain of AFTERs) addresses."""
    while address.op in (Ops.INDEX, Ops.AFTER):
        address = address.src[0]
    return address


def loop_end(k: KernelText, rng: UOp) -> str:
    """The text of a range's trip count: a literal, or the local computed before the loop from the variables."""
    return str(rng.src[0].arg) if rng.src[0].op is Ops.CONST else k.names[rng.src[0]]


def variable_argument(variable: UOp) -> str:
    """The argument name of a DEFINE_VAR in the kernel's signature (prefixed: no clash with the kernel's locals)."""
    return f"var_{variable.arg.name}"


def kernel_variables(linear: UOp) -> list[UOp]:
    """The DEFINE_VARs a program reads, sorted by name: they are its int arguments after the buffers, in this order
    (`ProgramSource.variables` lists them for the launcher)."""
    found = {u.arg.name: u for u in linear.src if u.op is Ops.DEFINE_VAR}
    return [found[name] for name in sorted(found)]


def global_params(linear: UOp) -> list[UOp]:
    """The buffer parameters of a program, in slot order."""
    found = {u.arg.slot: u for u in linear.src if u.op is Ops.PARAM and u.addrspace is AddrSpace.GLOBAL}
    return [found[slot] for slot in sorted(found)]
