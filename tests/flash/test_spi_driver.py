"""The ROM_SW engine driver and the GD25 chip driver, against the simulated board."""

from __future__ import annotations

import pytest

from tg.drivers import navi31_regs as r
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.state import new_state
from tg.flash.errors import FlashError
from tg.flash.gd25 import GD25LQ16E, has_jedec
from tg.flash.poll import wait_until
from tg.flash.spi import Navi31SPI, control_word, pack_tx_dwords


def test_control_word_layout() -> None:
    assert control_word(1, 0, False) == 0
    assert control_word(4, 0x100, False) == 0x30100
    assert control_word(4, 4, True) == 0x30000 | 0x80000 | 4


def test_tx_dwords_are_big_endian_and_zero_padded() -> None:
    assert pack_tx_dwords(b"\x11\x22\x33\x44\x55") == [0x11223344, 0x55000000]
    assert pack_tx_dwords(b"") == []


@pytest.mark.parametrize("rotation", [0, 1, 2, 3])
def test_has_jedec_tolerates_a_rotated_capture(rotation: int) -> None:
    capture = bytes.fromhex("c8601500")
    assert has_jedec(capture[rotation:] + capture[:rotation])


def test_has_jedec_rejects_other_chips() -> None:
    assert not has_jedec(bytes.fromhex("ef401500"))
    assert not has_jedec(bytes.fromhex("c8601600"))


def test_argument_checks() -> None:
    board = new_state().board()
    with pytest.raises(ValueError, match="prescale must be 0..15"):
        Navi31SPI(board, prescale=16)
    spi = Navi31SPI(board)
    with pytest.raises(ValueError, match="simultaneous TX and RX"):
        spi.transfer(0x03, data_out=b"x", data_in=1)
    with pytest.raises(ValueError, match="<= 256 bytes"):
        spi.transfer(0x03, data_in=257)
    chip = GD25LQ16E(spi)
    with pytest.raises(ValueError, match="crosses a 256-byte boundary"):
        chip.program_page(0xFF, b"ab")
    with pytest.raises(ValueError, match="not 4 KiB aligned"):
        chip.erase_sector(0x800)
    with pytest.raises(ValueError, match="read outside 2 MiB flash"):
        chip.read(0x1FFFFF, 2)
    assert board.trace == [], "argument errors must not touch a register"


def test_open_sets_the_prescaler_and_close_restores_rom_cntl() -> None:
    board = new_state().board()
    with Navi31SPI(board, prescale=3) as spi:
        assert board.regs[r.ROM_CNTL] == (0x08000003 & 0xE0FFFFFF) | 1 << 28 | 3 << 24 | 1
        GD25LQ16E(spi).identify()
    assert board.unrestored_registers() == {}


def test_a_failing_transaction_still_restores_every_register() -> None:
    board = new_state(faults=Faults(gated=True)).board()
    with pytest.raises(TimeoutError, match="engine may be gated"):
        with Navi31SPI(board, timeout=0.05) as spi:
            spi.transfer(0x9F, data_in=4)
    assert board.unrestored_registers() == {}


def test_clear_cmp_keeps_every_other_protection_bit() -> None:
    state = new_state(cmp=True)
    state.sr1 = 0x1C  # BP0-BP2
    board = state.board()
    board.chip.sr1, board.chip.sr2 = 0x1C, 0x43
    with Navi31SPI(board) as spi:
        chip = GD25LQ16E(spi)
        assert chip.clear_cmp() is True
        assert chip.clear_cmp() is False
    assert (board.chip.sr1, board.chip.sr2) == (0x1C, 0x03)


def test_wait_until_bounds_and_timeout() -> None:
    with pytest.raises(ValueError, match=r"timeout must be in \(0, 60\] seconds"):
        wait_until(lambda: True, 0, "x")
    with pytest.raises(ValueError):
        wait_until(lambda: True, 61, "x")
    with pytest.raises(TimeoutError, match="never"):
        wait_until(lambda: False, 0.01, "never")
    values = iter([0, 0, 7])
    assert wait_until(lambda: next(values), 1, "x") == 7


def test_write_enable_failure_is_reported() -> None:
    board = new_state(faults=Faults(wel_never_sets=True)).board()
    with Navi31SPI(board) as spi, pytest.raises(FlashError, match=r"WREN failed \(SR1=0x00\)"):
        GD25LQ16E(spi).erase_sector(0)
    assert board.unrestored_registers() == {}
