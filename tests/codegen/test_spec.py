"""The spec checker: well-typed kernel graphs pass, broken ones fail, and SPEC=1 turns it on in graph_rewrite."""

import pytest

from tg.codegen import AxisType, KernelInfo, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, pipeline
from tg.codegen.flags import Context
from tg.codegen.pipeline import CodegenFlags, Stage, lower_kernel
from tg.codegen.uop.spec import KERNEL_SPEC, LINEAR_SPEC, TENSOR_SPEC, SpecError, type_verify


def _kernel() -> UOp:
    out, inp = UOp.param(0, dtypes.float, 16), UOp.param(1, dtypes.float, 16)
    r = UOp.range(16, 0)
    value = inp.index(r).load() * 2.0
    return out.index(r).store(value).end(r).sink(arg=KernelInfo("double"))


def test_well_typed_kernel_passes():
    type_verify(_kernel())
    type_verify((UOp.variable("x", 0, 4) * 3 < 5).where(1, 2))


@pytest.mark.parametrize(
    "bad",
    [
        UOp(Ops.ADD, dtypes.int32, (UOp.const(1, dtypes.int32), UOp.const(1.0, dtypes.float))),
        UOp(Ops.CMPLT, dtypes.int32, (UOp.const(1), UOp.const(2))),
        UOp(Ops.WHERE, dtypes.index, (UOp.const(1), UOp.const(2), UOp.const(3))),
        UOp(Ops.CONST, dtypes.float, (), 1),
        UOp(Ops.STORE, dtypes.void, (UOp.param(0, dtypes.float, 4).index(UOp.const(0)), UOp.const(1, dtypes.int32))),
        UOp(Ops.IDIV, dtypes.float, (UOp.const(1.0, dtypes.float), UOp.const(2.0, dtypes.float))),
        UOp(Ops.END, dtypes.void, (UOp.const(1), UOp.const(2))),
    ],
    ids=["mixed add", "cmp not bool", "where cond not bool", "float const int arg", "store dtype", "float idiv", "end"],
)
def test_broken_graphs_fail(bad: UOp):
    with pytest.raises(SpecError):
        type_verify(bad)


def test_strict_mode_rejects_ops_without_rules():
    graph = UOp(Ops.CONTIGUOUS, dtypes.float, (UOp.const(1.0, dtypes.float),))  # a tensor-graph op
    type_verify(graph, spec=KERNEL_SPEC)
    type_verify(graph, strict=True, spec=TENSOR_SPEC)
    with pytest.raises(SpecError, match="no spec rule"):
        type_verify(graph, strict=True, spec=KERNEL_SPEC)


def test_each_stage_has_its_own_spec():
    on_device = UOp(Ops.CONST, dtypes.float, (UOp(Ops.DEVICE, dtypes.void, (), "CPU"),), 2.0)
    type_verify(on_device, strict=True, spec=TENSOR_SPEC)  # a tensor-graph constant lives on a device
    with pytest.raises(SpecError, match="CONST"):
        type_verify(on_device, spec=KERNEL_SPEC)  # a kernel's constants do not
    linear = lower_kernel(_kernel(), CodegenFlags())
    type_verify(linear, strict=True, spec=LINEAR_SPEC)
    unbalanced = linear.replace(src=tuple(u for u in linear.src if u.op is not Ops.END))
    with pytest.raises(SpecError, match="LINEAR"):
        type_verify(unbalanced, spec=LINEAR_SPEC)
    with pytest.raises(SpecError, match="no spec rule for Ops.REDUCE"):  # reductions are accumulators by then
        type_verify(UOp.const(1.0, dtypes.float).reduce(UOp.range(4, 0, AxisType.REDUCE)), True, LINEAR_SPEC)


def test_a_stage_that_breaks_its_spec_is_named(monkeypatch):
    def breaks(ast: UOp, flags: CodegenFlags) -> UOp:
        return ast.replace(src=(*ast.src, UOp(Ops.CMPLT, dtypes.int32, (UOp.const(1), UOp.const(2)))))

    monkeypatch.setattr(pipeline, "KERNEL_STAGES", (*pipeline.KERNEL_STAGES[:1], Stage("breaks", "", breaks)))
    lower_kernel(_kernel(), CodegenFlags())  # SPEC off: no check
    with Context(SPEC=1), pytest.raises(SpecError, match="after stage 'breaks'"):
        lower_kernel(_kernel(), CodegenFlags())


def test_spec_flag_checks_graph_rewrite_results():
    def make_bad(x: UOp) -> UOp:
        return UOp(Ops.ADD, dtypes.int32, (UOp.const(1, dtypes.int32), UOp.const(1.0, dtypes.float)))

    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), make_bad)])
    x = UOp.variable("x", 0, 3)
    graph_rewrite(x, pm)  # SPEC off: no check
    with Context(SPEC=1), pytest.raises(SpecError):
        graph_rewrite(x, pm)
