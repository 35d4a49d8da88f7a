"""An assign runs once, whichever realize runs it (torch: `c += 1` happens once, then every read sees it)."""

from __future__ import annotations

from tg.tensor import Tensor


def test_an_assign_run_by_another_tensors_realize_is_not_run_again() -> None:
    c = Tensor([1.0]).contiguous().realize()
    c.assign(c + 1)
    y = Tensor([2.0]) * c
    assert y.item() == 4.0  # runs the assign
    assert c.item() == 2.0
    assert c.item() == 2.0
    c.assign(c + 1)
    assert (Tensor([2.0]) * c).item() == 6.0
    assert c.item() == 3.0


def test_the_same_update_of_the_same_buffer_runs_every_time_it_is_asked_for() -> None:
    c = Tensor([0.0]).contiguous().realize()
    for i in range(4):
        c.assign(c + 1).realize()
        assert c.item() == float(i + 1)
