"""tg-beam on the command line: every k.pkl shape, bad input, --verify, --out, dump and the cache commands."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tg.beam.cli import app
from tg.codegen.opt.opts import Opt, OptOps
from tg.codegen.pipeline import CodegenFlags
from tg.codegen.schedule.schedule import KernelCall, create_schedule
from tg.codegen.serial import codegen_version, git_state, read_file
from tg.codegen.uop.args import KernelInfo
from tg.codegen.uop.ops import UOp
from tg.hcq.device import Device
from tg.tensor import Tensor

runner = CliRunner()


def small_kernel() -> UOp:
    t = Tensor.empty(24, 16) @ Tensor.empty(16, 8)
    return [item for item in create_schedule((t.uop,)).items if isinstance(item, KernelCall)][-1].ast


def write(path: Path, value: object) -> Path:
    path.write_bytes(pickle.dumps(value))  # a bare pickle: the IR pickles its enums by name
    return path


@pytest.mark.parametrize("shape", ["ast", "ast_opts", "replay_row", "list"])
def test_every_kernel_pickle_shape_is_searched(tmp_path: Path, shape: str) -> None:
    ast = small_kernel()
    upcast = (Opt(OptOps.UPCAST, 0, 2),)
    value = {
        "ast": ast,
        "ast_opts": (ast, upcast),
        "replay_row": (ast, Device["CPU"].renderer, CodegenFlags(), upcast),
        "list": [ast, (ast, upcast)],
    }[shape]
    result = runner.invoke(app, ["--kernel", str(write(tmp_path / "k.pkl", value)), "--beam", "1", "--json"])
    assert result.exit_code == 0, result.output
    documents = json.loads(result.stdout)
    documents = documents if isinstance(documents, list) else [documents]
    assert len(documents) == (2 if shape == "list" else 1)
    for document in documents:
        assert document["time_us"] > 0 and document["device"] == "CPU"
        assert document["spread_us"] >= 0 and "hand_coded_us" in document
    if shape in ("ast_opts", "replay_row"):
        assert documents[0]["opts"][0] == {"op": "UPCAST", "axis": 0, "arg": "2"}  # the search goes on from them


def test_verify_and_out_give_a_kernel_that_replays_its_opts(tmp_path: Path) -> None:
    kernel, out = write(tmp_path / "k.pkl", small_kernel()), tmp_path / "opt.pkl"
    result = runner.invoke(app, ["--kernel", str(kernel), "--beam", "2", "--verify", "--out", str(out), "--src"])
    assert result.exit_code == 0, result.output
    assert "verify: ok" in result.stdout and "final time" in result.stdout and "applied_opts" in result.stdout
    optimized, recorded = read_file(out)
    assert recorded["codegen_version"] == codegen_version() and recorded["commit"] == git_state()[0]
    assert recorded["compiler"] == Device["CPU"].compiler.identity() and recorded["dirty"] in ("yes", "no")
    assert recorded["flags"] == repr(CodegenFlags()) and recorded["device"] == "CPU"
    assert isinstance(optimized.arg, KernelInfo) and optimized.arg.opts_to_apply is not None
    again = runner.invoke(app, ["--kernel", str(out), "--beam", "2", "--json"])
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"not a pickle", "not a tg IR pickle"), (pickle.dumps({"a": 1}), "holds dict, not a kernel"),
     (pickle.dumps([]), "empty list")],
)  # fmt: skip
def test_bad_kernel_files_are_one_error_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "k.pkl"
    path.write_bytes(content)
    result = runner.invoke(app, ["--kernel", str(path)])
    assert result.exit_code == 1
    assert result.output.startswith("error:") and message in result.output and "Traceback" not in result.output


def test_unknown_device_is_an_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--kernel", str(write(tmp_path / "k.pkl", small_kernel())), "--device", "NOPE"])
    assert result.exit_code == 1 and result.output.startswith("error: unknown device")


def test_dump_writes_one_kernel_pickle_per_compiled_kernel(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text("from tg.tensor import Tensor\nprint(((Tensor.ones(5, 7) * 3).sum(axis=1) + 2).numpy())\n")
    folder = tmp_path / "kernels"
    result = runner.invoke(app, ["dump", str(folder), "--", sys.executable, str(script)])
    assert result.exit_code == 0, result.output
    dumped = sorted(folder.glob("*.pkl"))
    assert dumped
    _, recorded = read_file(dumped[0])
    assert recorded["codegen_version"] == codegen_version() and recorded["flags"].startswith("CodegenFlags(")
    searched = runner.invoke(app, ["--kernel", str(dumped[0]), "--beam", "1", "--verify"])
    assert searched.exit_code == 0 and "verify: ok" in searched.stdout


def test_cache_export_then_import_refuses_another_compiler(tmp_path: Path) -> None:
    kernel = write(tmp_path / "k.pkl", small_kernel())
    assert runner.invoke(app, ["--kernel", str(kernel), "--beam", "1"]).exit_code == 0
    exported = tmp_path / "beam.jsonl"
    result = runner.invoke(app, ["cache", "export", str(exported)])
    assert result.exit_code == 0 and "exported 1 results" in result.stdout
    lines = exported.read_text().splitlines()
    foreign = json.loads(lines[1])
    foreign["compiler"] = "some-other-cc|1.0|-O3|x86_64|Another CPU"
    foreign["kernel"] = "00" * 32
    exported.write_text("\n".join([*lines, json.dumps(foreign)]) + "\n")
    imported = runner.invoke(app, ["cache", "import", str(exported)])
    assert imported.exit_code == 0 and "imported 1 results, refused 1" in imported.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    assert runner.invoke(app, ["cache", "import", str(bad)]).exit_code == 1


class RunsAShellCommand:
    """What a crafted k.pkl holds: unpickling it with plain pickle would run `touch MARKER`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("where", ["alone", "inside_a_kernel_tuple"])
def test_a_crafted_kernel_file_is_refused_and_runs_nothing(tmp_path: Path, where: str) -> None:
    marker = tmp_path / "pwned"
    payload = RunsAShellCommand(marker)
    value = payload if where == "alone" else (small_kernel(), (payload,))
    path = write(tmp_path / "k.pkl", value)
    result = runner.invoke(app, ["--kernel", str(path), "--beam", "1"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error:") and "refused posix.system" in result.output
    assert "Traceback" not in result.output
    assert not marker.exists()  # the command never ran


def test_a_kernel_file_with_an_op_this_tg_lacks_names_it(tmp_path: Path) -> None:
    data = pickle.dumps(small_kernel()).replace(b"\x05STORE", b"\x05STORX")  # one op renamed by "another version"
    path = tmp_path / "k.pkl"
    path.write_bytes(data)
    result = runner.invoke(app, ["--kernel", str(path), "--beam", "1"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"error: {path}: Ops.STORX is not in this tg's Ops table "
                                                  "(written by a tg with another Ops table)"]  # fmt: skip


def test_the_result_line_reports_the_hand_coded_time_and_the_spread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tg.hcq.engine import beam as engine_beam

    found = engine_beam.BeamResult((Opt(OptOps.UPCAST, 0, 2),), 2e-6, cached=False, spread=3e-7,
                                   hand_coded_seconds=4e-6)  # fmt: skip
    monkeypatch.setattr(engine_beam, "search_opts", lambda *args, **kwargs: found)
    result = runner.invoke(app, ["--kernel", str(write(tmp_path / "k.pkl", small_kernel())), "--beam", "2"])
    assert result.exit_code == 0, result.output
    line = "final time 2.0 us (searched; hand-coded 4.0 us, spread 0.3 us over interleaved repeats, beam 2 on CPU)"
    assert line in result.stdout
