"""The digits training example, shortened: it learns (test accuracy well above chance after two epochs), each step
is one schedule with a fixed, small number of kernels, and the script prints its accuracy line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tg.tensor import GlobalCounters, Tensor, nn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_digits.py"


def _example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_epochs_learn_the_digits():
    result = _example().train(epochs=2, batch_size=32, lr=3e-3, seed=0)
    assert result.losses[1] < min(result.losses[0], 0.5), result.losses
    assert result.test_accuracy >= 0.9, result.test_accuracy


@pytest.mark.slow
def test_each_step_is_one_schedule_with_a_fixed_kernel_count(monkeypatch):
    example = _example()
    import tg.tensor.engine as engine

    schedules = []
    original = engine.realize
    monkeypatch.setattr(engine, "realize", lambda *nodes: schedules.append(len(nodes)) or original(*nodes))
    Tensor.manual_seed(1)
    data = example.load_digits_split(1)
    model = example.DigitsCNN()
    optimizer = nn.optim.Adam(nn.get_parameters(model), lr=1e-3)
    kernels = []
    with Tensor.train():
        for step in range(3):
            batch = slice(step * 32, (step + 1) * 32)
            schedules.clear()
            before = GlobalCounters.kernel_count
            loss = example.train_step(model, optimizer, data.train_images[batch], data.train_labels[batch])
            kernels.append(GlobalCounters.kernel_count - before)
            assert np.isfinite(loss.item())
            # uploads of the batch are not schedules; the step itself is exactly one realize of everything
            assert len([count for count in schedules if count > 1]) == 1, schedules
    # forward, backward, 6 parameters with Adam's m and v, 2 step powers, the loss: a few dozen, and steady
    # 53: the fusion policy (issue 23) gives two backward-pass producers their own kernels rather than recompute,
    # conv1+relu its own kernel rather than computing it inside conv2's padded input, each conv bias gradient a
    # buffer rather than a recompute in both Adam moments' kernels, and the conv backward (tg.tensor.conv_backward)
    # a channels-last copy of each output gradient; 56: the weights of each conv (two forward, one input gradient)
    # copied output channels innermost (tg.tensor.conv.output_channels_innermost)
    assert kernels[1] == kernels[2] <= 56, kernels


@pytest.mark.slow
def test_script_prints_the_test_accuracy():
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--epochs", "1", "--batch-size", "32"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "epoch 1/1: mean loss" in run.stdout
    assert "test accuracy" in run.stdout
