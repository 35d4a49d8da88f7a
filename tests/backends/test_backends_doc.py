"""docs/backends.md stays true: its table names every registered renderer, and the sizes it gives for the PTX and
WGSL checks are the sizes of the tests' kernels."""

from __future__ import annotations

import re
from pathlib import Path

from tg.codegen.render.registry import RENDERERS

from .test_edge_cases_backends import ROWS
from .test_ptx import ALL, bitcasts_kernel, casts_kernel, ops_kernel, outputs, sweep_sources
from .test_wgsl import NOT_EXACT_IN_WGSL, WGSL_DTYPES

DOC = (Path(__file__).resolve().parents[2] / "docs" / "backends.md").read_text()


def test_the_table_names_every_registered_renderer() -> None:
    named = set()
    for row in re.findall(r"^\| `(\w+)`(?: \(`(\w+)`\))? \|", DOC, re.MULTILINE):
        named.update(name for name in row if name)
    assert named == set(RENDERERS)


def test_the_counts_in_the_doc_are_the_tests() -> None:
    op_results = sum(len(outputs(ops_kernel(d))) for d in ALL)
    wgsl_rows = [r for r in ROWS if r[2] in WGSL_DTYPES and r[1] not in NOT_EXACT_IN_WGSL]
    for phrase in (
        f"a sweep of {len(sweep_sources())} kernels",
        f"each of the {len(ALL)} dtypes",
        f"all {len(outputs(casts_kernel()))} casts",
        f"{len(outputs(bitcasts_kernel()))} bit casts",
        f"all {op_results} op results",
        f"the {len(ROWS)} rows",
        f"the {len(wgsl_rows)} rows of the edge-case table for i32, u32 and f32",
    ):
        assert phrase in " ".join(DOC.split()), phrase
