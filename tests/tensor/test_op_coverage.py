"""docs/ops.md, the op-coverage table, checked against Tensor and the tests: every public Tensor name has a row,
every tested row names test files that exercise the op on the devices it claims, and pending rows name ops that
do not exist yet (so a newly landed op fails here until its row is filled in)."""

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tg.tensor import Tensor

from .devices import DEVICES

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "ops.md"
TESTS = Path(__file__).resolve().parent
NOT_TESTED = ("pending", "not yet")


@dataclass(frozen=True)
class Row:
    op: str
    family: str
    devices: tuple[str, ...]
    tests: str
    gradient: str


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row; `\\|` is a literal bar inside a cell."""
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [part.strip().replace("\\|", "|") for part in parts]


def read_table() -> list[Row]:
    rows = []
    for line in TABLE.read_text().splitlines():
        if not line.startswith("| `"):
            continue
        cells = _cells(line)
        op, family, devices, tests = cells[:4]
        gradient = cells[4] if len(cells) > 4 else ""
        rows.append(Row(op.strip("`"), family, tuple(d.strip() for d in devices.split(",")), tests, gradient))
    return rows


ROWS = read_table()
TESTED = [row for row in ROWS if not row.tests.startswith(NOT_TESTED)]
UNTESTED = [row for row in ROWS if row.tests.startswith(NOT_TESTED)]


def public_names() -> set[str]:
    return {name for name in dir(Tensor) if not name.startswith("_")}


def test_every_public_tensor_name_has_a_row():
    missing = public_names() - {row.op for row in ROWS}
    assert not missing, f"add rows to docs/ops.md for: {sorted(missing)}"


def test_each_op_has_one_row():
    ops = [row.op for row in ROWS]
    assert len(ops) == len(set(ops)), sorted({op for op in ops if ops.count(op) > 1})


def _test_entries(cell: str) -> list[tuple[str, str | None]]:
    """`file.py (as OP), other.py` -> [(file.py, OP), (other.py, None)]."""
    entries = []
    for match in re.finditer(r"(test_\w+\.py)(?:\s*\(as `([^`]+)`\))?", cell):
        entries.append((match.group(1), match.group(2)))
    return entries


def _calls(text: str, op: str, operator: str | None) -> bool:
    if operator is not None and operator in text:
        return True
    return re.search(rf"(?<!np)(?<!numpy)\.{re.escape(op)}\b|\"{re.escape(op)}\"", text) is not None


@pytest.mark.parametrize("row", TESTED, ids=lambda row: row.op)
def test_tested_row_names_files_that_exercise_the_op_on_its_devices(row):
    assert row.op in public_names(), f"{row.op} is in the table but not on Tensor"
    entries = _test_entries(row.tests)
    assert entries, f"{row.op}: no test file named"
    texts = []
    for file_name, operator in entries:
        path = TESTS / file_name
        assert path.exists(), f"{row.op}: {file_name} does not exist"
        text = path.read_text()
        assert _calls(text, row.op, operator), f"{row.op}: {file_name} does not call it"
        texts.append(text)
    for device in row.devices:
        assert any(_runs_on(text, device) for text in texts), f"{row.op}: no listed file runs on {device}"


def _runs_on(test_text: str, device: str) -> bool:
    """A test file runs on `device` when it names it, or when it parametrizes over the shared DEVICES (devices.py)."""
    return f'"{device}"' in test_text or ("from .devices import DEVICES" in test_text and device in DEVICES)


@pytest.mark.parametrize("row", UNTESTED, ids=lambda row: row.op)
def test_pending_row_names_an_op_that_does_not_exist_yet(row):
    assert row.op not in public_names(), f"{row.op} now exists: fill in its row in docs/ops.md with its tests"


GRADIENT_KINDS = ("checked", "none (", "zero (", "stops", "n/a", "not yet", "not checked", "through ")


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.op)
def test_gradient_column_says_what_the_gradient_is(row):
    assert row.gradient.startswith(GRADIENT_KINDS), f"{row.op}: gradient cell {row.gradient!r}"
    for file_name, _ in _test_entries(row.gradient):
        path = TESTS / file_name
        assert path.exists(), f"{row.op}: {file_name} does not exist"
        assert _calls(path.read_text(), row.op, None), f"{row.op}: {file_name} does not check its gradient"
