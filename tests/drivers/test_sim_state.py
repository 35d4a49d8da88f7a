"""Simulator state survives a save/load round trip, and the PSP mailbox answers its protocol."""

from pathlib import Path

import pytest

from tg.drivers import navi31_regs as r
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.state import load_state, new_state, save_state


def test_state_round_trip(tmp_path: Path) -> None:
    state = new_state(faults=Faults(stuck_bits={7: 1}, psp_errors={10: 12}, aperture="mirrored"), cmp=True)
    state.flash[100] = 0x42
    state.registers = {r.ROM_CNTL: 0x1234}
    state.psp.position = 3
    save_state(state, tmp_path / "s.sim")
    loaded = load_state(tmp_path / "s.sim")
    assert loaded.flash == state.flash and loaded.ifwi == state.ifwi
    assert loaded.faults == state.faults and loaded.sr2 == 0x40
    assert loaded.registers == {r.ROM_CNTL: 0x1234} and loaded.psp.position == 3
    assert loaded.psp.items == state.psp.items


def test_not_a_state_file(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"hello\nworld")
    with pytest.raises(ValueError, match="not a simulated Navi31 state"):
        load_state(tmp_path / "x")
    with pytest.raises(ValueError, match="exactly 0x200000"):
        new_state(b"\xff" * 10)


def test_psp_mailbox_protocol() -> None:
    board = new_state().board()
    assert board.read32(r.PSP_COMMAND) & 0x80000000
    board.write32(r.PSP_COMMAND, 0x07 << 16)
    assert not board.read32(r.PSP_COMMAND) & 0x80000000
    board.write32(r.PSP_DOORBELL, 1)
    replies = [board.read32(r.PSP_COMMAND) for _ in range(3)]
    assert replies[0] == 0x00070000 and replies[-1] == 0x80000000
    assert board.read32(r.PSP_COMMAND_DATA) == 0x001
