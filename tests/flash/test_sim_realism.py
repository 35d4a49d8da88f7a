"""Simulator realism (issue 20 item 7): time-based BUSY, clear errors for damaged state files, the DONE poll
and the PSP ready check are enforced by the simulated hardware."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tg.drivers import navi31_regs as r
from tg.drivers.sim.board import SimNavi31Board
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import GD25Chip
from tg.drivers.sim.romsw import SimProtocolError
from tg.drivers.sim.state import FORMAT


def test_a_flash_interrupted_mid_erase_leaves_a_usable_board(make_board) -> None:
    """Regression: BUSY was a poll count saved in the state file, so a Ctrl-C during an erase left every later
    command reading JEDEC ffffffff. Here the saved state says 'busy for 30 ms more' (an interrupted erase)."""
    board = make_board()
    board.edit(busy_until=time.time() + 0.03, busy_scale=1.0)
    time.sleep(0.06)
    result = board.run("info")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("JEDEC capture: c8601500")
    assert "busy_polls" not in board.path.read_bytes().partition(b"\n")[0].decode()


def test_a_chip_still_busy_is_waited_for(make_board, tmp_path: Path, random_image) -> None:
    board = make_board(random_image(1))
    board.edit(busy_scale=0.2)  # 10 ms per sector erase: wait_idle must really wait
    image = random_image(2)
    (tmp_path / "i.bin").write_bytes(image)
    result = board.run("flash", str(tmp_path / "i.bin"), "--start-sector", "3", "--sector-count", "2", "--yes")
    assert result.exit_code == 0, result.stderr
    assert board.flash()[0x3000:0x5000] == image[0x3000:0x5000]


def _header_and_body(path: Path) -> tuple[dict, bytes]:
    head, _, body = path.read_bytes().partition(b"\n")
    return json.loads(head), body


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda h, b: (b"{not json", b), "is not a simulated Navi31 state file"),
        (lambda h, b: (json.dumps({**h, "format": "tg-sim-navi31/1"}).encode(), b), "recreate it with sim init"),
        (lambda h, b: (json.dumps(h).encode(), b[:1000]), "truncated or damaged"),
        (lambda h, b: (json.dumps({**h, "sr1": "loud"}).encode(), b), "damaged simulated Navi31 state file"),
        (lambda h, b: (json.dumps({k: v for k, v in h.items() if k != "psp"}).encode(), b), "damaged"),
        (lambda h, b: (json.dumps({**h, "faults": {"no_such_fault": 1}}).encode(), b), "damaged"),
        (lambda h, b: (json.dumps({**h, "via": "carrier pigeon"}).encode(), b), "damaged"),
    ],
)
def test_a_damaged_state_file_is_one_clear_error(make_board, damage, message) -> None:
    board = make_board()
    header, body = _header_and_body(board.path)
    head, body = damage(header, body)
    board.path.write_bytes(head + b"\n" + body)
    result = board.run("info")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert header["format"] == FORMAT


def _start_read(board: SimNavi31Board, opcode: int, count: int) -> None:
    """One ROM_SW receive transaction with the seed's preconditions, but without polling for DONE."""
    board.write32(r.GPIO_PAD_MASK, 0)
    board.write32(r.GPIO_PAD_A, 0)
    board.write32(r.GPIO_PAD_EN, 0)
    board.write32(r.PAGE_MIRROR_CNTL, 0x06000000)
    board.write32(r.ROM_CNTL, 8)
    board.write32(r.ROM_SW_CNTL, 0)
    board.write32(r.ROM_SW_STATUS, 0)
    board.write32(r.ROM_SW_COMMAND, opcode)
    board.write32(r.ROM_SW_CNTL, r.RETURN_DATA_EN | count)


def test_data_appears_only_after_the_done_bit_and_skipping_the_poll_is_refused() -> None:
    board = SimNavi31Board(GD25Chip())
    _start_read(board, 0x9F, 4)
    while not board.read32(r.ROM_SW_STATUS) & 1:
        pass
    _start_read(board, 0x9F, 4)  # the second RDID: its window shows the first one's capture after DONE
    assert board.read(r.ROM_SW_DATA, 4) == b"\xff" * 4, "no data before the DONE bit"
    with pytest.raises(SimProtocolError, match="before the previous one completed"):
        _start_read(board, 0x9F, 4)
    board = SimNavi31Board(GD25Chip())
    for _ in range(2):
        _start_read(board, 0x9F, 4)
        while not board.read32(r.ROM_SW_STATUS) & 1:
            pass
    assert board.read(r.ROM_SW_DATA, 4) == bytes([0xC8, 0x60, 0x15, 0x00])


def test_psp_ready_check_fails_clearly_and_sends_nothing(make_board) -> None:
    board = make_board(faults=Faults(psp_not_ready=True))
    result = board.run("fw", "probe")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: PSP mailbox is not ready before command 0x01: status=0x00000000"
    assert board.state().psp.position == 0


def test_the_simulated_psp_refuses_a_command_written_while_busy() -> None:
    board = SimNavi31Board(GD25Chip())
    board.write32(r.PSP_COMMAND, 0x07 << 16)
    board.write32(r.PSP_DOORBELL, 1)
    with pytest.raises(SimProtocolError, match="not ready"):
        board.write32(r.PSP_COMMAND, 0x06 << 16)
