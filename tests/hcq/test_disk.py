"""The DISK device: a file mapped as a buffer."""

from __future__ import annotations

import os
import resource

import numpy as np
import pytest

from tg.hcq import Buffer


def test_view_at_an_offset_reads_the_file(tmp_path, kit) -> None:
    data = np.random.default_rng(2).standard_normal(256).astype(np.float32)
    path = tmp_path / "weights.bin"
    path.write_bytes(b"HEADER__" + data.tobytes())
    whole = Buffer(f"DISK:{path}", 8 + data.nbytes, kit.uint8).allocate()
    tensor = whole.view(256, kit.float32, offset=8)
    np.testing.assert_array_equal(np.frombuffer(tensor.as_buffer(), np.float32), data)


def test_large_sparse_file_is_not_read_whole(tmp_path, kit) -> None:
    path = tmp_path / "huge.bin"
    size = 8 << 30  # 8 GiB, sparse: reading it whole would need 8 GiB of memory
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(size - 4)
        f.write(b"\x01\x02\x03\x04")
    peak_kib_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # (KiB on Linux)
    whole = Buffer(f"DISK:{path}", size, kit.uint8).allocate()
    tail = whole.view(4, kit.uint8, offset=size - 4)
    assert tail.as_buffer().tolist() == [1, 2, 3, 4]
    # reading the file whole would hold 8 GiB; mapping it and touching one page holds a few KiB
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_kib_before < 256 * 1024


def test_zero_copy_view_sees_file_changes(tmp_path, kit) -> None:
    path = tmp_path / "live.bin"
    path.write_bytes(bytes(8))
    buf = Buffer(f"DISK:{path}", 8, kit.uint8).allocate()
    live = buf.as_buffer(allow_zero_copy=True)
    with open(path, "r+b") as f:
        f.write(b"\x09")
    assert live[0] == 9


def test_copyin_writes_the_file(tmp_path, kit) -> None:
    path = tmp_path / "out.bin"
    buf = Buffer(f"DISK:{path}", 6, kit.uint8).allocate()  # the file is created at the right size
    buf.copyin(b"tg-hcq")
    assert path.read_bytes() == b"tg-hcq"


def test_read_only_file_can_be_read_but_not_written(tmp_path, kit) -> None:
    path = tmp_path / "ro.bin"
    path.write_bytes(b"abcd")
    os.chmod(path, 0o444)
    if os.access(path, os.W_OK):
        pytest.skip("running as a user that can write read-only files (root)")
    buf = Buffer(f"DISK:{path}", 4, kit.uint8).allocate()
    assert bytes(buf.as_buffer()) == b"abcd"
    with pytest.raises(PermissionError):
        buf.copyin(b"wxyz")


def test_a_replaced_file_is_mapped_again(tmp_path, kit) -> None:
    """Saving weights writes a new file and renames it over the old one: a DISK device opened before must read the
    new file (not the old mapping) and follow a change of size."""
    path = tmp_path / "weights.bin"
    path.write_bytes(b"old!")
    assert Buffer(f"DISK:{path}", 4, kit.uint8).allocate().as_buffer().tobytes() == b"old!"
    replacement = tmp_path / "weights.tmp"
    replacement.write_bytes(b"new contents")
    os.replace(replacement, path)
    assert Buffer(f"DISK:{path}", 12, kit.uint8).allocate().as_buffer().tobytes() == b"new contents"
