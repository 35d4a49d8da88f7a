"""Transport selection rules: auto tries USB then PCI and never the simulator, which is only used by name."""

from pathlib import Path

import pytest

from tg.drivers.pci import DeviceMatch
from tg.drivers.sim.state import new_state, save_state
from tg.drivers.transport import BoardRequest, Transport, TransportError, open_board, parse_transport

NAVI31 = (DeviceMatch(0xFFFF, (0x744C,)),)


def test_parse_transport_accepts_the_five_names() -> None:
    assert [parse_transport(n) for n in ("auto", "usb", "pci", "sim", "remote")] == list(Transport)
    with pytest.raises(ValueError, match="unsupported transport 'serial'"):
        parse_transport("serial")


def test_usb_without_a_bridge_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    from tg.drivers import usb

    monkeypatch.setattr(usb, "list_devices", lambda ids: [])
    with pytest.raises(TransportError, match="no supported usb AMD GPU found"):
        open_board(BoardRequest(Transport.USB, 0, 0x1002, NAVI31, 5, sysfs_root=tmp_path))


def test_auto_tries_usb_first_then_pci(tmp_path: Path, monkeypatch) -> None:
    from tg.drivers import transport, usb

    asked = []
    monkeypatch.setattr(usb, "list_devices", lambda ids: asked.append(ids) or [])
    monkeypatch.setattr(transport, "_open_pci", lambda request: "pci board")
    assert open_board(BoardRequest(Transport.AUTO, 0, 0x1002, NAVI31, 5, sysfs_root=tmp_path)) == "pci board"
    assert asked == [((0x3801, 0x0001), (0xADD1, 0x0001))]
    monkeypatch.setattr(usb, "list_devices", lambda ids: ["a bridge"])
    monkeypatch.setattr(transport, "_open_usb", lambda request: "usb board")
    assert open_board(BoardRequest(Transport.AUTO, 0, 0x1002, NAVI31, 5, sysfs_root=tmp_path)) == "usb board"


def test_auto_never_picks_the_simulator(tmp_path: Path) -> None:
    state = tmp_path / "board.sim"
    save_state(new_state(), state)
    # With no PCI device present, auto finds nothing, even though a simulator state exists ...
    with pytest.raises(TransportError, match="no supported AMD GPU found"):
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
