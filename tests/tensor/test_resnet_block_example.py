"""examples/resnet_block.py (the ResNet basic block whose kernels bench/bench_beam_cluster.py searches) runs and
matches its numpy reference (the example asserts it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resnet_block.py"


def test_the_resnet_block_example_matches_numpy(capsys) -> None:  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("resnet_block", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
    assert "ResNet basic block: (2, 16, 16, 16) -> (2, 16, 16, 16)" in capsys.readouterr().out
