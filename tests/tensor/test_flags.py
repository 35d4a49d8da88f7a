"""Flags the Tensor front end owns."""

from __future__ import annotations

import os
import subprocess
import sys


def test_default_float_is_a_front_end_setting_applied_when_tg_tensor_is_imported() -> None:
    code = (
        "from tg.codegen import dtypes\n"
        "before = dtypes.default_float.name\n"
        "import tg.tensor\n"
        "print(before, dtypes.default_float.name)\n"
    )
    env = {**os.environ, "DEFAULT_FLOAT": "HALF"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["float", "half"]


def test_the_front_end_flag_lives_in_tg_tensor() -> None:
    import tg.codegen.flags
    from tg.tensor.flags import DEFAULT_FLOAT

    assert DEFAULT_FLOAT is tg.codegen.flags.FLAGS["DEFAULT_FLOAT"]
    assert not hasattr(tg.codegen.flags, "DEFAULT_FLOAT")
