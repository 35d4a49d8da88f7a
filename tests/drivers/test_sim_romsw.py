"""The simulated ROM_SW engine: preconditions, wire order, and the receive window's one-transaction lag."""

import pytest

from tg.drivers import navi31_regs as r
from tg.drivers.sim.board import SimNavi31Board
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import GD25Chip
from tg.drivers.sim.registers import GATED_STATUS
from tg.drivers.sim.romsw import SimProtocolError


def prepared_board(**faults) -> SimNavi31Board:
    board = SimNavi31Board(GD25Chip(faults=Faults(**faults)))
    for offset in (r.GPIO_PAD_MASK, r.GPIO_PAD_A, r.GPIO_PAD_EN):
        board.write32(offset, board.read32(offset) & ~r.SPI_GPIO_BITS)
    board.write32(r.PAGE_MIRROR_CNTL, 0x06000000)
    board.write32(r.ROM_CNTL, 0x18000008)
    return board


def start(board: SimNavi31Board, opcode: int, address: int, control: int) -> None:
    board.write32(r.ROM_SW_STATUS, 0)
    board.write32(r.ROM_SW_COMMAND, (address << 8) | opcode)
    board.write32(r.ROM_SW_CNTL, control)


def wait_done(board: SimNavi31Board) -> None:
    while not board.read32(r.ROM_SW_STATUS) & 1:
        pass


def test_rx_window_shows_the_previous_transaction() -> None:
    board = prepared_board()
    board.chip.data[0x100:0x104] = b"ABCD"
    start(board, 0x03, 0x100, (3 << 16) | r.RETURN_DATA_EN | 4)
    wait_done(board)
    assert board.read(r.ROM_SW_DATA, 4) != b"ABCD"
    start(board, 0x9F, 0, r.RETURN_DATA_EN | 4)
    wait_done(board)
    assert board.read(r.ROM_SW_DATA, 4) == b"ABCD"


def test_tx_dwords_go_on_the_wire_big_endian_and_address_msb_first() -> None:
    board = prepared_board()
    board.chip.transact(b"\x06", 0)
    board.write32(r.ROM_SW_DATA, 0x11223344)
    board.write32(r.ROM_SW_DATA + 4, 0x55000000)
    start(board, 0x02, 0x012345, (3 << 16) | 5)
    assert board.chip.data[0x012345:0x01234A] == bytes.fromhex("1122334455")


def test_done_bit_needs_polls_and_gated_engine_never_completes() -> None:
    board = prepared_board()
    start(board, 0x05, 0, r.RETURN_DATA_EN | 1)
    assert [board.read32(r.ROM_SW_STATUS) & 1 for _ in range(2)] == [0, 1]
    gated = prepared_board(gated=True)
    start(gated, 0x05, 0, r.RETURN_DATA_EN | 1)
    assert all(gated.read32(r.ROM_SW_STATUS) == GATED_STATUS for _ in range(10))


@pytest.mark.parametrize(
    "register, value, complaint",
    [
        (r.GPIO_PAD_A, 0x80, "GPIO_PAD_A still owns the SPI pins"),
        (r.PAGE_MIRROR_CNTL, 0x02000000, "PAGE_MIRROR_CNTL bits 27:25"),
        (r.ROM_CNTL, 0x18000001, "ROM_CNTL low nibble is not 8"),
    ],
)
def test_a_transfer_with_wrong_preconditions_is_rejected(register: int, value: int, complaint: str) -> None:
    board = prepared_board()
    board.write32(register, value)
    with pytest.raises(SimProtocolError, match=complaint):
        start(board, 0x05, 0, r.RETURN_DATA_EN | 1)


def test_status_must_be_cleared_before_each_transaction() -> None:
    board = prepared_board()
    start(board, 0x05, 0, r.RETURN_DATA_EN | 1)
    wait_done(board)
    board.write32(r.ROM_SW_COMMAND, 0x05)
    with pytest.raises(SimProtocolError, match="ROM_SW_STATUS was not cleared"):
        board.write32(r.ROM_SW_CNTL, r.RETURN_DATA_EN | 1)


def test_byte_count_beyond_the_window_is_rejected() -> None:
    with pytest.raises(SimProtocolError, match="exceeds the 256-byte data window"):
        start(prepared_board(), 0x03, 0, (3 << 16) | r.RETURN_DATA_EN | 0x101)
