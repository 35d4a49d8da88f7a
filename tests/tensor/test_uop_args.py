"""Every op declares the type of its `arg` (tg.codegen.uop.ops.ARG_TYPES); every node that scheduling, optimizing
and lowering real Tensor programs creates must carry an arg of that type."""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen.schedule import schedule as scheduler
from tg.codegen.uop import ops as uop_ops
from tg.codegen.uop.ops import ARG_TYPES, Ops, UOp, arg_type_error
from tg.hcq.engine import clear_program_cache
from tg.tensor import Tensor, dtypes


def test_every_op_declares_its_arg_type() -> None:
    assert set(ARG_TYPES) == set(Ops)


def test_a_wrong_arg_is_named() -> None:
    assert arg_type_error(UOp.range(4, 0)) is None
    wrong = UOp(Ops.RANGE, dtypes.index, (UOp.const(4),), "not a RangeArg")
    assert "RANGE" in arg_type_error(wrong) and "str" in arg_type_error(wrong)


def programs() -> None:
    x = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    w = Tensor(np.ones((5, 2, 3, 3), np.float32))
    image = Tensor(np.ones((1, 2, 6, 6), np.float32))
    results = [
        x.softmax(axis=-1),
        x.reshape(6, 4) @ x.reshape(4, 6),
        image.conv2d(w, padding=1),
        x.pad(((1, 0), (0, 0), (0, 2))),
        x.flip(0).permute(2, 0, 1)[1:3],
        x.cumsum(axis=2),
        (x > 3).where(x, -x).max(axis=1),
        x.cast(dtypes.int32) // 3,
        x.sum(),
        (x.reshape(24) + 1).exp().sqrt().sin().log(),
        x.to("PYTHON") * 2,
    ]
    target = Tensor.zeros(2, 3, 4).contiguous()
    target.assign(target + x)
    Tensor.realize(*results, target)


def test_every_node_of_real_programs_has_an_arg_of_its_declared_type(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong: list[str] = []
    original = uop_ops.UOp.__new__

    def checked_new(cls, op, dtype=dtypes.void, src=(), arg=None, tag=None):  # the signature of UOp.__new__
        node = original(cls, op, dtype, src, arg, tag)
        problem = arg_type_error(node)
        if problem:
            wrong.append(problem)
        return node

    scheduler._schedule_cache.clear()
    clear_program_cache()
    monkeypatch.setattr(uop_ops.UOp, "__new__", checked_new)
    programs()
    assert wrong == []
