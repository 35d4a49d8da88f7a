"""docs/architecture.md must name the pipeline's stages in the order the code runs them, and the files that cite it
must point at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

from tg.codegen.pipeline import KERNEL_STAGES
from tg.codegen.schedule.schedule import SCHEDULE_STAGES

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _stage_line(starting_with: str) -> list[str]:
    """The backticked names in the numbered step of the data-flow section that starts with `starting_with`."""
    step = re.search(rf"\*\*{re.escape(starting_with)}\*\*.*?(?=\n\d\. |\n## |\Z)", DOC, re.S)
    assert step, f"no step {starting_with!r} in docs/architecture.md"
    stages_part = step.group(0).split("Stages, in order:", 1)[1]
    return re.findall(r"`([^`]+)`", stages_part)


def test_schedule_stages_are_documented_in_order() -> None:
    assert _stage_line("Schedule") == [name for name, _ in SCHEDULE_STAGES]


def test_kernel_stages_are_documented_in_order() -> None:
    documented = _stage_line("Kernel -> source")
    assert documented[: len(KERNEL_STAGES)] == [stage.name for stage in KERNEL_STAGES]
    assert documented[len(KERNEL_STAGES)] == "render"


def test_every_library_is_described() -> None:
    for package in ("tg.codegen", "tg.drivers", "tg.hcq", "tg.tensor"):
        assert f"| `{package}` |" in DOC


def test_documents_cited_by_the_repository_exist() -> None:
    cited = re.findall(r"\(([\w./-]+\.md)", (ROOT / ".pre-commit-config.yaml").read_text())
    assert cited, "the import-linter hook names the document that explains the rules"
    for path in cited:
        assert (ROOT / path).is_file(), f".pre-commit-config.yaml cites {path}, which does not exist"
