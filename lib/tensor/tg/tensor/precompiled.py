"""Precompiled calls: a call that runs as one opaque unit into output buffers of its own, instead of being inlined.

    out = Tensor.call(a, b, fxn=body, precompile=True)       # @function(precompile=True) builds the same
    (y, z) = UOp.call_with_outputs((f0.uop, f1.uop), a.uop, precompile=True)

A precompiled call is a call with outputs (tg.codegen.schedule.calls): `CALL(SINK(STORE(PARAM(m+i), v_i)...),
*inputs, *output buffers)` with `CallInfo.precompile` set. The scheduler never inlines it. At realize, before the
graph around it is scheduled (tg.tensor.custom_kernel.run_calls, which runs custom kernels the same way), its
inputs are realized, then its body alone is scheduled and run over their buffers, each value stored into a buffer
of its own; the graph reads those buffers from then on. So nothing outside the call fuses into its kernels and
nothing inside it fuses out, and a body the scheduler can make one kernel runs as one kernel. The body's schedule
and programs are cached like any other (by graph, with its input buffers abstracted), so calling it again on new
inputs compiles nothing. A call runs once: its outputs realized later read the buffers it filled.

Gradients flow through the body (autograd of the inlined values) unless the call has a grad_fxn.
"""

from __future__ import annotations

import weakref

from tg.codegen import Ops, UOp
from tg.codegen.schedule.calls import stored_slots, substitute_params


def input_arguments(call: UOp) -> list[UOp]:
    """The arguments of a call with outputs that are not its outputs."""
    outputs = set(stored_slots(call.src[0]))
    return [argument for k, argument in enumerate(call.src[1:]) if k not in outputs]


# each precompiled call that ran -> its outputs' realized nodes: realizing another of its outputs later (or the same
# one from another tensor) reads them rather than running the call again
_ran: weakref.WeakKeyDictionary[UOp, dict[UOp, UOp]] = weakref.WeakKeyDictionary()


def ran_outputs(call: UOp) -> dict[UOp, UOp] | None:
    """The realized outputs of `call` if it ran already."""
    return _ran.get(call)


def run_precompiled(call: UOp, inputs: list[UOp]) -> dict[UOp, UOp]:
    """Run precompiled `call` on its realized `inputs`; each of its outputs mapped to the realized node holding it."""
    from tg.tensor.custom_kernel import run_calls
    from tg.tensor.engine import realize

    outputs = call.src[1 + len(inputs) :]
    arguments = (*inputs, *outputs)
    values = [store.src[1] for store in call.src[0].src]
    bodies = tuple(UOp(Ops.CONTIGUOUS, v.dtype, (substitute_params(v, arguments),)) for v in values)
    realized = realize(*run_calls(bodies))  # (run_calls: a custom kernel or precompiled call inside the body)
    results = {UOp(Ops.AFTER, out.dtype, (out, call)): node for out, node in zip(outputs, realized, strict=True)}
    _ran[call] = results
    return results
