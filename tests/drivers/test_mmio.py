"""MMIOInterface over a plain buffer: byte and 32-bit access, slices, bounds."""

import pytest

from tg.drivers.mmio import BufferMMIO


def test_registers_are_little_endian_and_writes_mask_to_32_bits() -> None:
    buffer = bytearray(16)
    mmio = BufferMMIO(buffer)
    mmio.write32(4, 0x1_1223_3445)
    assert buffer[4:8] == bytes([0x45, 0x34, 0x23, 0x12])
    assert mmio.read32(4) == 0x12233445


def test_unaligned_dword_access_goes_through_bytes() -> None:
    mmio = BufferMMIO(bytearray(16))
    mmio.write32(2, 0xAABBCCDD)
    assert mmio.read(2, 4) == bytes([0xDD, 0xCC, 0xBB, 0xAA])
    assert mmio.read32(2) == 0xAABBCCDD


def test_slices_read_and_write_raw_bytes() -> None:
    buffer = bytearray(range(32))
    mmio = BufferMMIO(buffer)
    assert mmio[4:8] == bytes([4, 5, 6, 7])
    assert mmio[9] == 9
    mmio[0:3] = b"abc"
    mmio[31] = 0xFF
    assert buffer[:3] == b"abc" and buffer[31] == 0xFF
    with pytest.raises(ValueError):
        mmio[0:3] = b"toolong"
    with pytest.raises(ValueError):
        mmio[0:8:2]


def test_access_outside_the_bar_is_refused() -> None:
    mmio = BufferMMIO(bytearray(16))
    with pytest.raises(IndexError):
        mmio.read32(14)
    with pytest.raises(IndexError):
        mmio.write(15, b"ab")
    with pytest.raises(IndexError):
        mmio[16]
