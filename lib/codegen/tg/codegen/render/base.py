"""What every renderer returns, and the interface it implements."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tg.codegen.uop.ops import Ops, UOp


@dataclass(frozen=True)
class RenderedKernel:
    """Source for one kernel: the function `name`, launched with `global_size` (on CPU: the number of calls,
    each with its own core_id), taking the buffers in PARAM slot order."""

    name: str
    src: str
    global_size: tuple[int, int, int] = (1, 1, 1)


class Renderer:
    """Turns a LINEAR program into source. `device` names the device family it renders for."""

    device: str = ""

    def render(self, linear: UOp) -> RenderedKernel:
        raise NotImplementedError


def loop_iterations(linear: UOp) -> int:
    """The iterations of the innermost work if every loop ran to its end (an estimate of kernel size)."""
    return math.prod(u.src[0].arg for u in linear.src if u.op is Ops.RANGE)


def global_params(linear: UOp) -> list[UOp]:
    """The buffer parameters of a program, in slot order."""
    found = {u.arg.slot: u for u in linear.src if u.op is Ops.PARAM and u.addrspace.name == "GLOBAL"}
    return [found[slot] for slot in sorted(found)]
