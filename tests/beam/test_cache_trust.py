"""The BEAM cache can be trusted: its key holds the codegen version, an entry whose opts no longer apply is dropped
and searched again, `cache import` refuses malformed opts, and kernels that cannot be timed are refused."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tg.beam.cli import app
from tg.codegen.opt.opts import Opt, OptOps
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.uop.ops import UOp
from tg.hcq.engine import beam as engine_beam
from tg.hcq.engine.beam import BeamResult, cached_opts, store_opts
from tg.tensor import Tensor

runner = CliRunner()


def small_kernel() -> UOp:
    t = Tensor.empty(24, 16) @ Tensor.empty(16, 8)
    return [item for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall)][-1].ast


def kernel_file(tmp_path: Path, value: object) -> Path:
    path = tmp_path / "k.pkl"
    path.write_bytes(pickle.dumps(value))
    return path


def test_the_cache_key_holds_the_codegen_version(monkeypatch: pytest.MonkeyPatch) -> None:
    ast, opts = small_kernel(), (Opt(OptOps.UPCAST, 0, 2),)
    store_opts(ast, "CPU", 2, BeamResult(opts, 1e-6, cached=False))
    assert cached_opts(ast, "CPU", 2) == BeamResult(opts, 1e-6, cached=True)
    monkeypatch.setattr(engine_beam, "codegen_version", lambda: "another-codegen")
    assert cached_opts(ast, "CPU", 2) is None  # a result found by another codegen is not used


def test_an_entry_whose_opts_no_longer_apply_is_dropped_and_searched_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ast = small_kernel()
    stale = (Opt(OptOps.UPCAST, 5, 2),)  # the kernel has 3 axes: axis 5 does not exist
    store_opts(ast, "CPU", 1, BeamResult(stale, 1e-9, cached=False))
    assert cached_opts(ast, "CPU", 1) is None
    warning = capsys.readouterr().err
    assert warning.startswith("warning: the cached BEAM opts for ") and "no longer apply" in warning
    assert "searching again" in warning
    store_opts(ast, "CPU", 1, BeamResult(stale, 1e-9, cached=False))
    result = runner.invoke(app, ["--kernel", str(kernel_file(tmp_path, ast)), "--beam", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "no longer apply" in result.output
    document = json.loads(result.stdout)
    assert document["cached"] is False and document["opts"] != [{"op": "UPCAST", "axis": 5, "arg": "2"}]


@pytest.mark.parametrize(
    ("opts", "problem"),
    [('[["UPCAST", 0, "two"]]', "UPCAST takes an axis and a whole number"),
     ('[["NO_SUCH_OP", 0, 2]]', "cannot be read (KeyError"),
     ('[["SPLIT", 0, [4, "AxisType.NOPE"]]]', "cannot be read (KeyError"),
     ('[["UPCAST", -1, 2]]', "axis -1 is not an axis number")],
)  # fmt: skip
def test_cache_import_refuses_malformed_opts(tmp_path: Path, opts: str, problem: str) -> None:
    ast = small_kernel()
    store_opts(ast, "CPU", 2, BeamResult((Opt(OptOps.UPCAST, 0, 2),), 1e-6, cached=False))
    exported = tmp_path / "beam.jsonl"
    assert runner.invoke(app, ["cache", "export", str(exported)]).exit_code == 0
    header, entry = exported.read_text().splitlines()
    bad = dict(json.loads(entry), opts=opts, kernel="ab" * 32)
    exported.write_text("\n".join([header, entry, json.dumps(bad)]) + "\n")
    result = runner.invoke(app, ["cache", "import", str(exported)])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {exported} line 3: invalid opts: ") and problem in result.output
    assert "nothing imported" in result.output


def test_cache_import_refuses_results_of_another_codegen(tmp_path: Path) -> None:
    store_opts(small_kernel(), "CPU", 2, BeamResult((Opt(OptOps.UPCAST, 0, 2),), 1e-6, cached=False))
    exported = tmp_path / "beam.jsonl"
    assert runner.invoke(app, ["cache", "export", str(exported)]).exit_code == 0
    header, entry = exported.read_text().splitlines()
    foreign = dict(json.loads(entry), codegen="0123456789abcdef", kernel="cd" * 32)
    exported.write_text("\n".join([header, entry, json.dumps(foreign)]) + "\n")
    result = runner.invoke(app, ["cache", "import", str(exported)])
    assert result.exit_code == 0
    assert "imported 1 results, refused 0 made with another compiler or CPU model and 1 made by another codegen" in (
        result.stdout
    )


def symbolic_kernel() -> UOp:
    n = UOp.variable("n", 1, 10)
    t = (Tensor.empty(10)[: n.bind(4)] * 2).sum()
    return [item for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall)][-1].ast


def test_a_kernel_with_unbound_variables_is_refused_and_told_about_var(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--kernel", str(kernel_file(tmp_path, symbolic_kernel())), "--beam", "1"])
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "has unbound variables (n)" in result.output
    assert "--var n=10" in result.output


@pytest.mark.parametrize(
    ("option", "problem"), [("n=11", "n of kernel r_1_n lies in 1..10"), ("n", "expected NAME=INTEGER")]
)
def test_a_var_outside_its_bounds_or_malformed_is_one_error_line(tmp_path: Path, option: str, problem: str) -> None:
    path = kernel_file(tmp_path, symbolic_kernel())
    result = runner.invoke(app, ["--kernel", str(path), "--beam", "1", "--var", option])
    assert result.exit_code == 1 and result.output.startswith("error: ") and problem in result.output


def test_a_symbolic_kernel_is_searched_timed_and_verified_with_var_values(tmp_path: Path) -> None:
    path = kernel_file(tmp_path, symbolic_kernel())
    args = ["--kernel", str(path), "--beam", "2", "--var", "n=7", "--verify", "--timing", "--json", "--ignore-cache"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["verified"] is True and document["time_us"] > 0


def test_the_null_device_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--kernel", str(kernel_file(tmp_path, small_kernel())), "--device", "NULL"])
    assert result.exit_code == 1
    assert result.output.startswith("error: device NULL runs no kernels")
