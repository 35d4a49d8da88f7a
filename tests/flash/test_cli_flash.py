"""End-to-end tests of the ROM_SW commands (info, read, dump, verify, flash) against the simulator."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tg.drivers.navi31_regs import FLASH_SIZE
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import JEDEC_ID, SFDP_TABLE
from tg.flash.cli import app

SECTOR = 0x1000


def test_info_prints_jedec_status_and_sfdp(make_board) -> None:
    board = make_board(sr2=0x40)
    result = board.run("info")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"JEDEC capture: {JEDEC_ID.hex()}") and lines[0].endswith("(C8 60 15 detected)")
    assert lines[1] == "SR1/SR2/SR3: 00/40/60  CMP=set"
    # The engine clocks the SFDP dummy byte in as data: the signature starts at offset 1.
    assert lines[2] == f"SFDP capture: ff{SFDP_TABLE[:23].hex()}  signature_offset=1"


def test_info_accepts_a_rotated_jedec_capture(make_board) -> None:
    board = make_board(jedec_rotation=1)
    result = board.run("info")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("JEDEC capture: 601500c8")


def test_info_refuses_an_unknown_chip(make_board, monkeypatch) -> None:
    from tg.drivers.sim import gd25

    monkeypatch.setattr(gd25, "JEDEC_ID", bytes([0xEF, 0x40, 0x15]))  # a Winbond W25Q16 answers instead
    board = make_board()
    result = board.run("info")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: unexpected GD25LQ16E JEDEC capture: ef401500 (refusing an unknown chip)"
    board.assert_registers_restored()


def test_info_json_is_one_document(make_board) -> None:
    board = make_board()
    result = board.runner.invoke(app, ["--json", "--transport", "sim", "--sim-state", str(board.path), "info"])
    document = json.loads(result.stdout)
    assert document["ok"] and document["jedec"].startswith("c86015") and document["signature_offset"] == 1


def test_read_prints_hex_of_the_simulated_chip(random_image, make_board) -> None:
    image = random_image(1)
    board = make_board(image)
    result = board.run("read", "0x1230", "0x40")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == image[0x1230:0x1270].hex()


def test_read_to_file_and_rejects_out_of_range(random_image, make_board, tmp_path: Path) -> None:
    image = random_image(2)
    board = make_board(image)
    out = tmp_path / "part.bin"
    assert board.run("read", "0x1ff000", "4096", "-o", str(out)).exit_code == 0
    assert out.read_bytes() == image[0x1FF000:]
    result = board.run("read", "0x1fffff", "2")
    assert result.exit_code == 1 and result.stderr.strip() == "error: read outside 2 MiB flash"
    assert board.state().sessions == 1  # the bad read never opened the board


def test_dump_equals_the_simulated_chip(random_image, make_board, tmp_path: Path) -> None:
    image = random_image(3)
    board = make_board(image)
    out = tmp_path / "dump.bin"
    result = board.run("dump", str(out))
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes() == image
    lines = result.stdout.splitlines()
    assert lines[0] == "0x001000/0x200000" and lines[31] == "0x1f1000/0x200000" and len(lines) == 33
    assert lines[-1] == f"wrote {out} sha256={hashlib.sha256(image).hexdigest()}"
    board.assert_registers_restored()


def test_dump_to_a_missing_folder_fails_before_touching_the_board(make_board, tmp_path: Path) -> None:
    board = make_board()
    result = board.run("dump", str(tmp_path / "no" / "such" / "dump.bin"))
    assert result.exit_code == 1 and result.stderr.startswith("error: output folder")
    assert board.state().sessions == 0


def test_verify_passes_on_the_same_image(random_image, make_board, tmp_path: Path) -> None:
    image = random_image(4)
    board = make_board(image)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    result = board.run("verify", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"verified 0x200000 bytes sha256={hashlib.sha256(image).hexdigest()}"


def test_verify_reports_the_first_mismatching_offset(random_image, make_board, tmp_path: Path) -> None:
    image = bytearray(random_image(5))
    board = make_board(bytes(image))
    image[0x12345] ^= 0x10
    image[0x150000] ^= 0x01
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    result = board.run("verify", str(path))
    assert result.exit_code == 1
    flash_byte, image_byte = image[0x12345] ^ 0x10, image[0x12345]
    assert result.stderr.strip() == f"error: verify mismatch at 0x012345: flash={flash_byte:02x} image={image_byte:02x}"


def test_verify_checks_the_size_before_touching_the_board(make_board, tmp_path: Path) -> None:
    board = make_board(trace=True)
    path = tmp_path / "short.bin"
    path.write_bytes(b"\xff" * 100)
    result = board.run("verify", str(path))
    assert result.exit_code == 1 and "image must be exactly 0x200000 bytes" in result.stderr
    assert board.state().sessions == 0
    assert board.trace_text() == ""


def test_flash_of_a_random_image_then_dump_gives_it_back(random_image, make_board, tmp_path: Path) -> None:
    # The whole-chip version of this test is the slow speed test in test_speed_and_properties.py.
    original = random_image(6)
    board = make_board(original)
    image = bytearray(original)
    image[: 48 * SECTOR] = random_image(7, 48 * SECTOR)
    path, out = tmp_path / "image.bin", tmp_path / "dump.bin"
    path.write_bytes(image)
    result = board.run("flash", str(path), "--yes")
    assert result.exit_code == 0, result.stderr
    assert "48 written" in result.stdout and "464 skipped" in result.stdout
    assert board.run("dump", str(out)).exit_code == 0
    assert out.read_bytes() == image
    board.assert_registers_restored()


def test_second_flash_of_the_same_image_erases_nothing(random_image, make_board, tmp_path: Path) -> None:
    image = random_image(8)
    board = make_board(image, trace=True)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    result = board.run("--json", "flash", str(path), "--yes")
    summary = json.loads(result.stdout)
    assert summary["skipped"] == 512 and summary["erased"] == 0 and summary["pages_programmed"] == 0
    trace = board.trace_text()
    assert "ROM_SW_COMMAND" in trace
    commands = [int(line.split()[2], 16) & 0xFF for line in trace.splitlines() if "ROM_SW_COMMAND" in line]
    assert not set(commands) & {0x06, 0x01, 0x20, 0x02}, "a matching image must send no write opcode"


def test_flash_range_touches_only_those_sectors(random_image, make_board, tmp_path: Path) -> None:
    original = random_image(9)
    board = make_board(original)
    image = random_image(10)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    result = board.run("flash", str(path), "--start-sector", "0x80", "--sector-count", "64", "--yes")
    assert result.exit_code == 0, result.stderr
    flash = board.flash()
    start, end = 0x80 * SECTOR, (0x80 + 64) * SECTOR
    assert flash[start:end] == image[start:end]
    assert flash[:start] == original[:start] and flash[end:] == original[end:]


def test_flash_skips_erased_pages_and_unneeded_erases(make_board, tmp_path: Path) -> None:
    board = make_board()  # a blank chip
    blank = bytearray(b"\xff" * FLASH_SIZE)
    blank[0x3000:0x3010] = b"\x00" * 16  # one page of sector 3 carries data
    path = tmp_path / "image.bin"
    path.write_bytes(blank)
    board.edit(flash=bytearray(b"\xff" * FLASH_SIZE))
    result = board.run("--json", "flash", str(path), "--yes", "--sector-count", "8")
    summary = json.loads(result.stdout)
    assert summary == {**summary, "written": 1, "skipped": 7, "erased": 0, "pages_programmed": 1}
    assert board.flash() == bytes(blank)


def test_flash_without_yes_writes_nothing(random_image, make_board, tmp_path: Path) -> None:
    image = random_image(11)
    board = make_board(random_image(12), trace=True)
    before = board.path.read_bytes()
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    result = board.run("flash", str(path))
    assert result.exit_code == 1 and result.stderr.strip() == "error: refusing to write without --yes"
    # The state file is byte-identical and no session (hence no register access) was recorded.
    assert board.path.read_bytes() == before
    assert board.trace_text() == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--start-sector", "512"], "invalid sector range"),
        (["--start-sector", "500", "--sector-count", "13"], "invalid sector range"),
        (["--sector-count", "0"], "invalid sector range"),
    ],
)
def test_flash_rejects_bad_ranges_before_opening(random_image, make_board, tmp_path: Path, args, message) -> None:
    board = make_board()
    path = tmp_path / "image.bin"
    path.write_bytes(random_image(13))
    result = board.run("flash", str(path), "--yes", *args)
    assert result.exit_code == 1 and result.stderr.strip() == f"error: {message}"
    assert board.state().sessions == 0


def test_flash_refuses_cmp_without_clear_cmp(random_image, make_board, tmp_path: Path) -> None:
    original = random_image(14)
    board = make_board(original, sr2=0x40)
    path = tmp_path / "image.bin"
    path.write_bytes(random_image(15))
    result = board.run("flash", str(path), "--yes")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == "error: CMP protects the full array; rerun with --clear-cmp"
    assert board.flash() == original
    board.assert_registers_restored()


def test_flash_with_clear_cmp_clears_only_cmp_and_writes(random_image, make_board, tmp_path: Path) -> None:
    board = make_board(random_image(16), sr2=0x42)  # CMP plus QE, which must survive
    image = random_image(17)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    result = board.run("flash", str(path), "--yes", "--sector-count", "4")
    assert result.exit_code == 1
    result = board.run("flash", str(path), "--yes", "--sector-count", "4", "--clear-cmp")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("log: ")
    assert result.stdout.splitlines()[1] == "cleared SR2.CMP"
    assert board.state().sr2 == 0x02
    assert board.flash()[: 4 * SECTOR] == image[: 4 * SECTOR]


def test_block_protected_region_is_caught_by_the_read_back(random_image, make_board, tmp_path: Path) -> None:
    # BP0 alone protects the upper 64 KiB; the chip silently ignores erase and program there.
    original = random_image(18)
    board = make_board(original, sr1=0x04)
    image = random_image(19)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    result = board.run("flash", str(path), "--yes", "--start-sector", "0x1f0", "--sector-count", "1")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith("error: verify mismatch at 0x1f0000")
    assert board.flash() == original


FAULTS = [
    (Faults(gated=True), "ROM_SW transaction timeout (status=0x04000800); engine may be gated after SOS boot"),
    (Faults(status_stuck=True), "ROM_SW_STATUS did not clear"),
    (Faults(wel_never_sets=True), "WREN failed (SR1=0x00)"),
    (Faults(busy_forever=True), "flash remained busy for 2.0s"),
    (Faults(stuck_bits={0x2005: 0x80}), "verify mismatch at 0x002005"),
]


@pytest.mark.parametrize("faults, message", FAULTS, ids=["gated", "status", "wel", "busy", "stuck"])
def test_every_injected_fault_ends_in_a_clear_error_with_registers_restored(
    random_image, make_board, tmp_path: Path, faults: Faults, message: str
) -> None:
    image = bytearray(random_image(20))
    image[0x2005] &= 0x7F  # the stuck bit needs a 0 there to show
    board = make_board(faults=faults)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    command = ["flash", str(path), "--yes", "--start-sector", "2", "--sector-count", "1"]
    if faults.status_stuck:
        board.edit(registers={0x5A3A4: 0x2})  # a stale status that the engine will not let go of
    result = board.run(*command)
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 3 and lines[-1].startswith("error: ") and message in lines[-1]
    assert lines[0] == "last good sector: none (no sector of this run was completed)"
    assert lines[1].endswith("--start-sector 2 --sector-count 1 --yes")
    assert "Traceback" not in result.stderr + result.stdout
    board.assert_registers_restored()


def test_usage_errors_exit_2(cli) -> None:
    assert cli("--transport", "bogus", "info").exit_code == 2
    assert cli("--prescale", "16", "info").exit_code == 2
    assert cli("--transport", "sim", "read", "zz", "1").exit_code == 2
    # issue 20: a simulator option without the simulator is a usage error, not a failed operation
    assert cli("--sim-state", "board.sim", "info").exit_code == 2
    assert cli("--transport", "pci", "--sim-state", "board.sim", "dump", "x.bin").exit_code == 2


def test_usb_transport_without_a_bridge_is_one_clear_error(cli) -> None:
    result = cli("--transport", "usb", "info")
    assert result.exit_code == 1 and result.stderr.startswith("error: ")
    # this machine has no bridge, and perhaps no libusb either; either way the message says which
    assert "no supported usb AMD GPU found" in result.stderr or "libusb-1.0 is not available" in result.stderr


def test_sim_transport_needs_a_state_file(cli, tmp_path: Path) -> None:
    result = cli("--transport", "sim", "info")
    assert result.exit_code == 2 and "--sim-state" in result.stderr
    result = cli("--transport", "sim", "--sim-state", str(tmp_path / "missing.sim"), "info")
    assert result.exit_code == 1 and "does not exist" in result.stderr
