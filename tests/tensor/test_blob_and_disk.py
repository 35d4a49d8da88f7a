"""`Tensor.from_blob` wraps the caller's memory (reads and writes both ways, like tinygrad's), and `.to("disk:...")`
realizes whatever it is given (lazy values, views, math on a file) and writes it to the file. A blob is host memory:
the tests name a host-memory device (CPU, PYTHON), whatever the default device is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tg.hcq import Device
from tg.tensor import Tensor


def test_from_blob_reads_the_memory_when_used_not_when_made() -> None:
    array = np.arange(6, dtype=np.float32)
    t = Tensor.from_blob(array.ctypes.data, (2, 3), dtype="float32", device="CPU")
    array[0] = 100.0  # after the tensor was made
    np.testing.assert_array_equal((t + 0).numpy(), array.reshape(2, 3))


def test_writes_through_a_blob_tensor_land_in_the_memory() -> None:
    array = np.arange(6, dtype=np.float32)
    t = Tensor.from_blob(array.ctypes.data, (2, 3), dtype="float32", device="CPU")
    t[1] = Tensor([7.0, 8.0, 9.0], device="CPU")
    t.realize()
    Device[t.device].synchronize()  # kernels run asynchronously: wait before reading the memory from numpy
    np.testing.assert_array_equal(array, [0.0, 1.0, 2.0, 7.0, 8.0, 9.0])
    t.assign(t * 2).realize()
    Device[t.device].synchronize()
    np.testing.assert_array_equal(array, [0.0, 2.0, 4.0, 14.0, 16.0, 18.0])


def test_dropping_a_blob_tensor_leaves_the_memory_to_its_owner() -> None:
    array = np.full(4, 3.0, dtype=np.float32)
    t = Tensor.from_blob(array.ctypes.data, 4, dtype="float32", device="CPU")
    assert t.sum().item() == 12.0
    del t
    # these would reuse a recycled block
    others = [Tensor.full((4,), 9.0, device="CPU").contiguous().realize() for _ in range(4)]
    np.testing.assert_array_equal(array, np.full(4, 3.0, np.float32))
    assert all(o.numpy().tolist() == [9.0] * 4 for o in others)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_from_blob_shares_memory_on_every_host_memory_device(device: str) -> None:
    array = np.arange(4, dtype=np.int32)
    t = Tensor.from_blob(array.ctypes.data, 4, dtype="int32", device=device)
    array[3] = 30
    assert t.tolist() == [0, 1, 2, 30]
    t.assign(t + 1).realize()
    Device[t.device].synchronize()
    np.testing.assert_array_equal(array, [1, 2, 3, 31])


def test_from_blob_on_a_device_without_host_memory_is_an_error() -> None:
    array = np.zeros(2, dtype=np.float32)
    with pytest.raises(ValueError, match="host memory"):
        Tensor.from_blob(array.ctypes.data, 2, dtype="float32", device="NULL")


@pytest.mark.parametrize(
    ("name", "make", "expected"),
    [
        ("lazy math", lambda: Tensor([1.0, 2.0]) * 2, np.array([2.0, 4.0], np.float32)),
        ("arange", lambda: Tensor.arange(4), np.arange(4, dtype=np.int32)),
        ("constant", lambda: Tensor.ones(3), np.ones(3, np.float32)),
        ("transposed view", lambda: Tensor([[1.0, 2.0], [3.0, 4.0]]).T, np.array([1.0, 3.0, 2.0, 4.0], np.float32)),
    ],
)
def test_to_disk_of_an_unrealized_tensor_writes_the_file(tmp_path: Path, name: str, make, expected) -> None:
    path = tmp_path / "out.bin"
    on_disk = make().to(f"disk:{path}").realize()
    assert on_disk.device.startswith("DISK:")
    np.testing.assert_array_equal(np.fromfile(path, expected.dtype), expected, err_msg=name)


def test_views_and_math_of_a_file_can_be_read_and_written_to_another_file(tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    np.arange(8, dtype=np.float32).tofile(source)
    t = Tensor(source, dtype="float32")
    np.testing.assert_array_equal(t[2:5].numpy(), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal((t * 2).to("CPU").numpy(), np.arange(8) * 2.0)
    np.testing.assert_array_equal(t.reshape(2, 4).T.numpy(), np.arange(8, dtype=np.float32).reshape(2, 4).T)
    target = tmp_path / "target.bin"
    t[2:5].to(f"disk:{target}").realize()
    np.testing.assert_array_equal(np.fromfile(target, np.float32), [2.0, 3.0, 4.0])
