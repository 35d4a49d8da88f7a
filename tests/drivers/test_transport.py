"""Transport selection rules: usb is refused clearly, sim only when asked for by name."""

from pathlib import Path

import pytest

from tg.drivers.pci import DeviceMatch
from tg.drivers.sim.state import new_state, save_state
from tg.drivers.transport import BoardRequest, Transport, TransportError, open_board, parse_transport

NAVI31 = (DeviceMatch(0xFFFF, (0x744C,)),)


def test_parse_transport_accepts_the_four_names() -> None:
    assert [parse_transport(n) for n in ("auto", "usb", "pci", "sim")] == list(Transport)
    with pytest.raises(ValueError, match="unsupported transport 'remote'"):
        parse_transport("remote")


def test_usb_says_it_is_not_supported_yet(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="USB bridge transport .* not supported yet"):
        open_board(BoardRequest(Transport.USB, 0, 0x1002, NAVI31, 5, sysfs_root=tmp_path))


def test_auto_never_picks_the_simulator(tmp_path: Path) -> None:
    state = tmp_path / "board.sim"
    save_state(new_state(), state)
    # With no PCI device present, auto finds nothing, even though a simulator state exists ...
    with pytest.raises(TransportError, match="no supported auto AMD GPU found"):
        open_board(BoardRequest(Transport.AUTO, 0, 0x1002, NAVI31, 5, sysfs_root=tmp_path / "none"))
    # ... and handing it the state file is an error, not an invitation.
    with pytest.raises(ValueError, match="--sim-state is only used with --transport sim"):
        open_board(BoardRequest(Transport.AUTO, 0, 0x1002, NAVI31, 5, sim_state=state))


def test_sim_opens_the_state_and_saves_it_on_close(tmp_path: Path) -> None:
    state = tmp_path / "board.sim"
    save_state(new_state(), state)
    with open_board(BoardRequest(Transport.SIM, 0, 0x1002, NAVI31, 5, sim_state=state)) as board:
        board.mmio.write32(0x5A500, 0x1234)  # a scratch register the driver does not restore-check
    from tg.drivers.sim.state import load_state

    assert load_state(state).registers[0x5A500] == 0x1234
    with pytest.raises(TransportError, match="out of range"):
        open_board(BoardRequest(Transport.SIM, 1, 0x1002, NAVI31, 5, sim_state=state))


def test_closing_a_sim_session_with_unrestored_registers_is_an_error(tmp_path: Path) -> None:
    from tg.drivers.sim.romsw import SimProtocolError

    state = tmp_path / "board.sim"
    save_state(new_state(), state)
    board = open_board(BoardRequest(Transport.SIM, 0, 0x1002, NAVI31, 5, sim_state=state))
    board.mmio.write32(0x5A508, 0)  # GPIO_PAD_A left changed
    with pytest.raises(SimProtocolError, match="GPIO_PAD_A=0x00000000 \\(was 0x00000780\\)"):
        board.close()
