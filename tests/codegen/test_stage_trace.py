"""DEBUG=5 prints every schedule and kernel stage with its time and the rewrite rules that fired in it (issue 29,
item 4: "stages you can see")."""

from __future__ import annotations

import re

import pytest

from tg.codegen import dtypes
from tg.codegen.flags import Context
from tg.codegen.pipeline import KERNEL_STAGES
from tg.codegen.schedule.schedule import SCHEDULE_STAGES
from tg.codegen.stage_trace import traced
from tg.codegen.uop.ops import Ops, UOp
from tg.codegen.uop.pattern import PatternMatcher, UPat, graph_rewrite
from tg.tensor import Tensor

STAGE_LINE = re.compile(r"^(schedule|kernel) stage (.+?): (\d+\.\d\d) ms(; rules fired: (.+))?$")


def _stage_lines(text: str) -> dict[str, list[str]]:
    """Stage name -> the `rules fired` parts of its lines."""
    stages: dict[str, list[str]] = {}
    for line in text.splitlines():
        found = STAGE_LINE.match(line)
        if found:
            stages.setdefault(found.group(2), []).append(found.group(5) or "")
    return stages


def test_debug_5_prints_every_schedule_and_kernel_stage_with_its_time(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor.ones(16, 16).contiguous().realize()
    with Context(DEBUG=5):
        (x.softmax(-1) * 2).sum().realize()
    stages = _stage_lines(capsys.readouterr().out)
    assert {name for name, _ in SCHEDULE_STAGES} <= set(stages)
    assert {stage.name for stage in KERNEL_STAGES} <= set(stages)
    assert any(name.startswith("render (") for name in stages)
    assert any("x" in rules for lines in stages.values() for rules in lines)  # some rewrite rule fired somewhere


def test_debug_4_prints_no_stage_lines(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor.ones(8).contiguous().realize()
    with Context(DEBUG=4):
        (x + 1).realize()
    assert not _stage_lines(capsys.readouterr().out)


def double_a_one(one: UOp) -> UOp | None:
    return UOp.const(2, one.dtype) if one.arg == 1 else None


def test_rule_counts_are_exact_and_belong_to_the_innermost_stage(capsys: pytest.CaptureFixture[str]) -> None:
    ones = [UOp.const(1, dtypes.int32), UOp.const(1, dtypes.int64), UOp.const(1, dtypes.int16)]
    matcher = PatternMatcher([(UPat(Ops.CONST, name="one"), double_a_one)], name="doubler")
    with Context(DEBUG=5):
        with traced("kernel", "outer"):
            with traced("kernel", "inner"):
                graph_rewrite(UOp.sink(*ones), matcher)
    assert _stage_lines(capsys.readouterr().out) == {"inner": ["doubler:double_a_one x3"], "outer": [""]}


def test_without_debug_5_no_rule_is_counted(capsys: pytest.CaptureFixture[str]) -> None:
    matcher = PatternMatcher([(UPat(Ops.CONST, name="one"), double_a_one)], name="doubler")
    with Context(DEBUG=4):
        with traced("kernel", "quiet"):
            graph_rewrite(UOp.sink(UOp.const(1, dtypes.int32)), matcher)
    assert capsys.readouterr().out == ""


def test_linearize_shows_its_named_steps_at_debug_5(capsys) -> None:  # noqa: ANN001
    """Issue 29 item 4: linearize is four named steps, each printed with its time at DEBUG=5."""
    from tg.codegen import AxisType, KernelInfo, Ops, UOp, dtypes
    from tg.codegen.flags import Context
    from tg.codegen.lower.linearize import LINEARIZE_STEPS, linearize

    out, a = UOp.param(0, dtypes.float32, 4), UOp.param(1, dtypes.float32, 32)
    i, j = UOp.range(4, 0), UOp.range(8, 1, AxisType.REDUCE)
    ast = UOp.sink(out.index(i).store(a.index(i * 8 + j).load().reduce(j, arg=Ops.ADD)), arg=KernelInfo("r_4_8"))
    with Context(DEBUG=5):
        linear = linearize(ast)
    printed = [line.split(":")[1].strip() for line in capsys.readouterr().out.splitlines() if "linearize: " in line]
    assert (
        printed == [name for name, _ in LINEARIZE_STEPS] == ["plan loops", "open loops", "emit stores", "close loops"]
    )
    assert linear.op is Ops.LINEAR and [u.op for u in linear.src].count(Ops.RANGE) == 2
