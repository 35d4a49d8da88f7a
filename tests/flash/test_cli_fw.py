"""End-to-end tests of the PSP firmware path (`fw ...`) against the simulated mailbox and ROM aperture."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tg.drivers.sim.faults import Faults
from tg.drivers.sim.ifwi import DEFAULT_TRANSFER_STATES, build_ifwi
from tg.drivers.sim.psp import DATA_TRANSFER, END_TRANSFER, START_TRANSFER

DISABLED = (
    "error: firmware writes are disabled: stock reflash validation failed; use `tg-flash flash` (ROM_SW) for recovery"
)


def psp_log(board) -> list[int]:
    """The PSP commands of the last session, decoded from the register trace (cmd << 16 into COMMAND)."""
    session = board.trace_text().split("# session ")[-1]
    return [int(line.split()[2], 16) >> 16 for line in session.splitlines() if line.startswith("W32 0582cc")]


def test_probe_prints_the_four_queries_and_sends_no_write_command(make_board) -> None:
    board = make_board(trace=True)
    result = board.run("fw", "probe")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "boot_partition: error=0x00 response=0x00000000",
        "fb_state: error=0x00 response=0x00000001",
        "model_id: error=0x00 response=0x00c86015",
        f"transfer_type: error=0x00 response=0x{DEFAULT_TRANSFER_STATES[0]:08x}",
    ]
    assert psp_log(board) == [0x01, 0x06, 0x0B, 0x07]
    assert result.stderr == ""


def test_probe_warns_when_sos_gates_updates(make_board) -> None:
    board = make_board(faults=Faults(psp_gated=True))
    result = board.run("fw", "probe")
    assert result.exit_code == 0
    assert "transfer_type: error=0x0a" in result.stdout
    assert result.stderr.strip() == "update commands gated: reset card and do not initialize AMDev/SOS"


def test_fw_dump_writes_the_raw_flash_and_restores_the_aperture(make_board, tmp_path: Path) -> None:
    board = make_board()  # holds the synthetic IFWI, which starts with AA55AA55
    out = tmp_path / "raw.bin"
    result = board.run("fw", "dump", str(out))
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes() == board.flash()
    lines = result.stdout.splitlines()
    assert lines[0] == "0x010000/0x200000" and lines[31] == "0x200000/0x200000"
    assert lines[-1].startswith("dumped 0x200000 bytes in ")
    assert lines[-1].endswith(f"sha256={hashlib.sha256(board.flash()).hexdigest()}")
    assert_seed_aperture_restore(board)


def bswap32(value: int) -> int:
    return int.from_bytes(value.to_bytes(4, "little"), "big")


def assert_seed_aperture_restore(board) -> None:
    """The seed restores ROM_INDEX and ROM_CNTL with bswap32 of the values it read (tools.md A.5 dump step 4,
    A.8.4): the raw registers end as bswap32 of their power-on values; every other register is untouched."""
    from tg.drivers import navi31_regs as regs
    from tg.drivers.sim.registers import POWER_ON_REGISTERS

    registers = board.state().registers
    assert registers[regs.ROM_CNTL] == bswap32(POWER_ON_REGISTERS[regs.ROM_CNTL]) == 0x03000008
    assert registers[regs.ROM_INDEX] == bswap32(POWER_ON_REGISTERS[regs.ROM_INDEX])
    for offset in (regs.PAGE_MIRROR_CNTL, regs.GPIO_PAD_MASK, regs.GPIO_PAD_A, regs.GPIO_PAD_EN):
        assert registers[offset] == POWER_ON_REGISTERS[offset]


def test_fw_dump_writes_the_aperture_enable_byte_swapped_like_the_seed(make_board, tmp_path: Path) -> None:
    """Regression (issue 20): tg wrote ROM_CNTL bit 29 unswapped and restored raw values; the seed swaps both."""
    board = make_board(trace=True)
    assert board.run("fw", "dump", str(tmp_path / "raw.bin")).exit_code == 0
    writes = [line.split() for line in board.trace_text().splitlines() if line.startswith("W32 05a380")]
    assert [int(w[2], 16) for w in writes] == [bswap32(0x08000003 | 1 << 29), bswap32(0x08000003)]


@pytest.mark.parametrize(
    "aperture, image, message",
    [
        ("unavailable", None, "raw SMUIO ROM controller is unavailable"),
        ("mirrored", None, "ROM aperture contains mirrored 1 MiB halves"),
        ("raw", b"\x00" * 0x200000, "invalid raw flash dump: size=0x200000 magic=00000000"),
    ],
)
def test_fw_dump_refuses_what_is_not_a_raw_dump(make_board, tmp_path: Path, aperture, image, message) -> None:
    board = make_board(image, faults=Faults(aperture=aperture))
    out = tmp_path / "raw.bin"
    result = board.run("fw", "dump", str(out))
    assert result.exit_code == 1
    assert message in result.stderr and result.stderr.startswith("error: ")
    assert not out.exists() and list(tmp_path.glob(".raw.bin*")) == []
    if aperture == "unavailable":
        board.assert_registers_restored()  # refused before any register was written
    else:
        assert_seed_aperture_restore(board)


def write_ifwi(tmp_path: Path, image: bytes | None = None) -> Path:
    path = tmp_path / "ifwi.bin"
    path.write_bytes(image if image is not None else build_ifwi(0).image)
    return path


def test_ifwi_all_streams_every_item_until_the_terminal_phase(make_board, tmp_path: Path) -> None:
    board = make_board()
    result = board.run("fw", "ifwi-all", str(write_ifwi(tmp_path)), "--yes")
    assert result.exit_code == 0, result.stderr
    state = board.state()
    assert state.psp.position == len(DEFAULT_TRANSFER_STATES)
    assert "IFWI stream complete after terminal state 0x208; hard power cycle required" in result.stdout
    steps = [line for line in result.stdout.splitlines() if line.startswith("IFWI step ")]
    assert len(steps) == len(DEFAULT_TRANSFER_STATES)
    assert steps[0] == "IFWI step 1: state=0x1 item=0x01 phase=0"


def test_ifwi_all_stops_after_19_items_without_a_terminal_phase(make_board, tmp_path: Path) -> None:
    ifwi = build_ifwi(0)
    from tg.drivers.sim.psp import PSPScript

    endless = PSPScript(states=[0x004, 0x005] * 10 + [0x004], items=dict(ifwi.items))
    board = make_board(psp=endless)
    result = board.run("fw", "ifwi-all", str(write_ifwi(tmp_path)), "--yes")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: IFWI stream did not reach terminal phase after 19 items (state=0x5)"


def test_ifwi_all_reports_a_firmware_error(make_board, tmp_path: Path) -> None:
    board = make_board(faults=Faults(psp_errors={END_TRANSFER: 0x0C}), trace=True)
    result = board.run("fw", "ifwi-all", str(write_ifwi(tmp_path)), "--yes")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: PSP end_transfer failed: error=0x0c (write to SPI error)"
    log = psp_log(board)
    assert log.count(END_TRANSFER) == 1, "a rejected END is not sent a second time"


def test_a_failed_data_transfer_still_ends_the_transfer(make_board, tmp_path: Path) -> None:
    board = make_board(faults=Faults(psp_errors={DATA_TRANSFER: 0x11}), trace=True)
    result = board.run("fw", "ifwi-all", str(write_ifwi(tmp_path)), "--yes")
    assert result.exit_code == 1
    assert "PSP data_transfer failed: error=0x11 (state machine transfer error)" in result.stderr
    assert psp_log(board)[-3:] == [START_TRANSFER, DATA_TRANSFER, END_TRANSFER]


def test_a_wrong_image_is_rejected_by_the_simulated_firmware(make_board, tmp_path: Path) -> None:
    board = make_board()
    other = build_ifwi(1).image  # the same layout, other bytes
    result = board.run("fw", "ifwi-all", str(write_ifwi(tmp_path, other)), "--yes")
    assert result.exit_code == 1
    assert "error=0x0d (signature validation error)" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["ifwi-all", "IFWI"], "error: refusing to stream without --yes"),
        (["ifwi-all", "SHORT", "--yes"], "error: Navi31 IFWI image must be exactly 2 MiB"),
        (["stream", "0x8", "IFWI"], "error: refusing to stream without --yes"),
        (["stream", "0x8", "IFWI", "--yes"], DISABLED),
        (["ifwi-step", "IFWI", "--yes"], DISABLED),
        (["live-flash", "IFWI"], "error: refusing to flash without --yes"),
        (["live-flash", "IFWI", "--yes"], DISABLED),
    ],
)
def test_writes_refuse_without_touching_the_board(make_board, tmp_path: Path, args, message) -> None:
    board = make_board(trace=True)
    ifwi = write_ifwi(tmp_path)
    short = tmp_path / "short.bin"
    short.write_bytes(b"\xaa" * 16)
    args = [str(ifwi) if a == "IFWI" else str(short) if a == "SHORT" else a for a in args]
    result = board.run("fw", *args)
    assert result.exit_code == 1
    assert result.stderr.strip() == message
    assert board.state().sessions == 0 and board.trace_text() == ""
