"""Writes through views land in the tensor the view was taken from, as in torch (numpy's views are the oracle):
setitem on views of views, assign on shrink/permute/flip/reshape views, detach; realized or lazy bases. A view whose
elements are not the base's own (expanded, padded) is a clear error, never a silently dropped write."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.tensor import Tensor

BASE = np.arange(12, dtype=np.float32).reshape(3, 4)


def _bases() -> list[tuple[str, Callable[[], Tensor]]]:
    return [
        ("realized", lambda: Tensor(BASE.copy()).contiguous().realize()),
        ("lazy", lambda: Tensor(BASE.copy()) + 0),
        ("lazy contiguous", lambda: (Tensor(BASE.copy()) * 1).contiguous()),
    ]


def _write_numpy(write: Callable[[np.ndarray], None]) -> np.ndarray:
    expected = BASE.copy()
    write(expected)
    return expected


WRITES: list[tuple[str, Callable, Callable]] = [
    ("t[1][2] = 5", lambda t: t[1].__setitem__(2, 5.0), lambda a: a[1].__setitem__(2, 5.0)),
    ("t.T[0, 1] = 7", lambda t: t.T.__setitem__((0, 1), 7.0), lambda a: a.T.__setitem__((0, 1), 7.0)),
    (
        "t[::-1][0] = v",
        lambda t: t[::-1].__setitem__(0, Tensor([9.0, 8, 7, 6])),
        lambda a: a[::-1].__setitem__(0, [9.0, 8, 7, 6]),
    ),
    (
        "t.detach()[1] = v",
        lambda t: t.detach().__setitem__(1, Tensor([-1.0, -2, -3, -4])),
        lambda a: a.__setitem__(1, [-1.0, -2, -3, -4]),
    ),
    (
        "t[1:][0][1:3] = v",
        lambda t: t[1:][0].__setitem__(slice(1, 3), Tensor([-5.0, -6])),
        lambda a: a[1:][0].__setitem__(slice(1, 3), [-5.0, -6]),
    ),
    (
        "t[:, ::2][1] = v",
        lambda t: t[:, ::2].__setitem__(1, Tensor([-7.0, -8])),
        lambda a: a[:, ::2].__setitem__(1, [-7.0, -8]),
    ),
    ("t[:2].assign(v)", lambda t: t[:2].assign(Tensor.ones(2, 4)), lambda a: a[:2].__setitem__(slice(None), 1.0)),
    (
        "t.permute(1, 0)[0].assign(v)",
        lambda t: t.permute(1, 0)[0].assign(Tensor([-1.0, -2, -3])),
        lambda a: a.transpose(1, 0)[0].__setitem__(slice(None), [-1.0, -2, -3]),
    ),
    (
        "t.flip(0)[0].assign(v)",
        lambda t: t.flip(0)[0].assign(Tensor([-4.0, -3, -2, -1])),
        lambda a: a[::-1][0].__setitem__(slice(None), [-4.0, -3, -2, -1]),
    ),
    (
        "t.reshape(12)[3:5].assign(v)",
        lambda t: t.reshape(12)[3:5].assign(Tensor([-9.0, -9])),
        lambda a: a.reshape(12)[3:5].__setitem__(slice(None), -9.0),
    ),
    (
        "t.reshape(2, 6).T[5].assign(v)",
        lambda t: t.reshape(2, 6).T[5].assign(Tensor([0.5, 0.25])),
        lambda a: a.reshape(2, 6).T[5].__setitem__(slice(None), [0.5, 0.25]),
    ),
    (
        "t.unsqueeze(0)[0, 2, 3] = v",
        lambda t: t.unsqueeze(0).__setitem__((0, 2, 3), 42.0),
        lambda a: a[None].__setitem__((0, 2, 3), 42.0),
    ),
    ("t[1] += 1", lambda t: t[1].__iadd__(1.0), lambda a: a[1].__iadd__(1.0)),
]


@pytest.mark.parametrize(("base_kind", "make"), _bases(), ids=[b[0] for b in _bases()])
@pytest.mark.parametrize(("name", "write", "write_numpy"), WRITES, ids=[w[0] for w in WRITES])
def test_a_write_through_a_view_lands_in_the_base(name: str, write, write_numpy, base_kind: str, make) -> None:
    t = make()
    write(t)
    np.testing.assert_array_equal(t.numpy(), _write_numpy(write_numpy), err_msg=f"{name} on a {base_kind} base")


def test_the_view_itself_shows_its_write_and_later_writes_to_the_base() -> None:
    t = Tensor(BASE.copy()).contiguous().realize()
    row = t[1]
    row[2] = 50.0
    np.testing.assert_array_equal(row.numpy(), [4.0, 5.0, 50.0, 7.0])
    t[1, 0] = -4.0
    np.testing.assert_array_equal(row.numpy(), [-4.0, 5.0, 50.0, 7.0])
    np.testing.assert_array_equal(t.numpy()[1], [-4.0, 5.0, 50.0, 7.0])


def test_an_unrealized_shrink_assign_lands() -> None:
    u = Tensor(np.zeros(5, np.float32)) + 1
    u[:3].assign(Tensor([7.0, 7.0, 7.0]))
    np.testing.assert_array_equal(u.numpy(), [7.0, 7.0, 7.0, 1.0, 1.0])


def test_a_realized_partial_assign_then_a_read_of_the_base_runs_the_write_once() -> None:
    t = Tensor(np.zeros(4, np.float32)).contiguous().realize()
    view = t[1:3]
    view.assign(view + 1).realize()  # the KV-cache pattern: the view's write realized on its own
    view.assign(view + 1).realize()
    np.testing.assert_array_equal(t.numpy(), [0.0, 2.0, 2.0, 0.0])


def test_two_writes_through_two_views_both_land() -> None:
    t = Tensor(BASE.copy()).contiguous().realize()
    t[0][0] = 100.0
    t.T[3][2] = 200.0
    expected = BASE.copy()
    expected[0, 0], expected[2, 3] = 100.0, 200.0
    np.testing.assert_array_equal(t.numpy(), expected)


@pytest.mark.parametrize(
    ("make_view", "message"),
    [(lambda t: t[0:1].expand(3, 4), "expanded view"), (lambda t: t.pad(((1, 0), None)), "padded view")],
    ids=["expand", "pad"],
)
def test_a_view_without_storage_of_its_own_is_an_error(make_view, message: str) -> None:
    t = Tensor(BASE.copy()).contiguous().realize()
    with pytest.raises(ValueError, match=message):
        make_view(t).assign(Tensor.zeros(*make_view(t).shape))
    np.testing.assert_array_equal(t.numpy(), BASE)


def test_a_write_to_a_clone_does_not_reach_the_original() -> None:
    t = Tensor(BASE.copy()).contiguous().realize()
    c = t.clone()
    c[0] = 0.0
    np.testing.assert_array_equal(t.numpy(), BASE)
    np.testing.assert_array_equal(c.numpy()[0], [0.0] * 4)


def test_a_view_used_in_an_expression_sees_later_writes_to_its_base() -> None:
    t = Tensor(BASE.copy()).contiguous().realize()
    row, column = t[1], t[:, 2]
    t[1, 2] = -1.0
    t.T[0] = Tensor([10.0, 20.0, 30.0])  # through another view
    expected = BASE.copy()
    expected[1, 2], expected[:, 0] = -1.0, [10.0, 20.0, 30.0]
    np.testing.assert_array_equal((row * 2).numpy(), expected[1] * 2)
    np.testing.assert_array_equal((column + 0).numpy(), expected[:, 2])


def test_a_write_through_a_bitcast_view_writes_the_bytes() -> None:
    """torch's `view(dtype)` of one item size shares the bytes: a write through it changes the base's bytes."""
    realized = Tensor(np.array([1.0, 2.0], np.float32)).contiguous().realize()
    realized.bitcast("int32")[0] = int(np.float32(5.0).view(np.int32))
    np.testing.assert_array_equal(realized.numpy(), [5.0, 2.0])
    lazy = Tensor(np.zeros(2, np.float32)) + 0
    lazy.bitcast("uint32").assign(Tensor(np.array([1.0, -2.0], np.float32).view(np.uint32)))
    np.testing.assert_array_equal(lazy.numpy(), [1.0, -2.0])
    raw = Tensor(np.zeros(8, np.uint8)).reshape(2, 4)
    raw[1].bitcast("int8")[1] = -1
    expected = np.zeros((2, 4), np.uint8)
    expected[1, 1] = 255
    np.testing.assert_array_equal(raw.numpy(), expected)
