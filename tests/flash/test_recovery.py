"""Recovery information (issue 20 item 6): the last good sector and the exact resume command after a failed
flash, per-sector lines in a log file, protection explained on a verify mismatch, and `wp status|disable`."""

from __future__ import annotations

import errno
import io
import json
import shlex
from pathlib import Path

import pytest

from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import GD25Chip
from tg.flash.protect import decode

KIB = 1024


def test_a_failed_flash_prints_the_last_good_sector_and_a_command_that_resumes(
    make_board, random_image, tmp_path: Path
) -> None:
    original, image = random_image(31), random_image(32)
    # a stuck bit in sector 12 makes its read-back fail after sectors 10 and 11 were written
    board = make_board(original, faults=Faults(stuck_bits={12 * 0x1000 + 5: 0x01}))
    path = tmp_path / "image.bin"
    path.write_bytes(bytes(image[:0xC005]) + bytes([image[0xC005] & 0xFE]) + image[0xC006:])
    log = tmp_path / "flash.log"
    result = board.run("flash", str(path), "--start-sector", "10", "--sector-count", "6", "--yes", "--log", str(log))
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "last good sector: 011 @0x0b000"
    assert lines[1].startswith("resume with: tg-flash --transport sim --sim-state ")
    assert lines[-1].startswith("error: verify mismatch at 0x00c005")
    resume = shlex.split(lines[1].removeprefix("resume with: "))
    assert resume[resume.index("--start-sector") + 1] == "12" and resume[resume.index("--sector-count") + 1] == "4"
    logged = log.read_text()
    assert "OK sector 010/511 @0x0a000" in logged and "OK sector 011/511 @0x0b000" in logged
    assert "resume with: tg-flash" in logged and "stopped: verify mismatch" in logged
    # the printed command, run as printed (without the program name), finishes the job once the fault is gone
    board.edit(faults=Faults())
    assert board.run(*resume[1 + 4 :]).exit_code == 0  # drop "tg-flash --transport sim --sim-state X"
    assert board.flash()[0xA000:0x10000] == path.read_bytes()[0xA000:0x10000]


def test_the_log_keeps_every_sector_line_even_on_a_terminal(make_board, random_image, tmp_path: Path) -> None:
    board = make_board(random_image(33))
    (tmp_path / "i.bin").write_bytes(random_image(34))
    result = board.run(
        "--json", "flash", str(tmp_path / "i.bin"), "--start-sector", "2", "--sector-count", "3", "--yes"
    )
    assert result.exit_code == 0, result.stderr
    log = Path(json.loads(result.stdout)["log"])
    assert log.parent.parent.name == "cache"  # the test's own TG_CACHE_DIR
    assert [line.split(" ", 1)[1][:19] for line in log.read_text().splitlines() if " sector " in line] == [
        "OK sector 002/511 @",
        "OK sector 003/511 @",
        "OK sector 004/511 @",
    ]


def test_a_log_that_is_a_symlink_is_refused(make_board, random_image, tmp_path: Path) -> None:
    (tmp_path / "target").write_text("x")
    (tmp_path / "link.log").symlink_to(tmp_path / "target")
    (tmp_path / "i.bin").write_bytes(random_image(1))
    result = make_board().run(
        "flash", str(tmp_path / "i.bin"), "--sector-count", "1", "--yes", "--log", str(tmp_path / "link.log")
    )
    assert result.exit_code == 1 and "is a symlink" in result.stderr


def test_a_mismatch_caused_by_block_protection_is_explained(make_board, random_image, tmp_path: Path) -> None:
    board = make_board(random_image(35), sr1=0x04)  # BP0: the upper 64 KiB are protected
    (tmp_path / "i.bin").write_bytes(random_image(36))
    result = board.run("flash", str(tmp_path / "i.bin"), "--start-sector", "0x1f0", "--sector-count", "1", "--yes")
    assert result.exit_code == 1
    error = result.stderr.splitlines()[-1]
    assert "lies in the write-protected range 0x1f0000-0x1fffff (64 KiB)" in error
    assert "BP4..BP0=00001" in error and "tg-flash wp disable --yes" in error


# The GD25LQ16E datasheet's protection table, rows written out by hand: (SR1 BP bits, SR2 CMP) -> range.
DATASHEET_ROWS = [
    (0b00000, 0, (0, 0)),
    (0b00001, 0, (0x1F0000, 0x200000)),  # upper 1/32
    (0b00010, 0, (0x1E0000, 0x200000)),  # upper 1/16
    (0b00101, 0, (0x100000, 0x200000)),  # upper 1/2
    (0b01001, 0, (0, 0x10000)),  # lower 1/32
    (0b01100, 0, (0, 0x80000)),  # lower 1/4
    (0b00110, 0, (0, 0x200000)),  # all
    (0b10001, 0, (0x200000 - 4 * KIB, 0x200000)),  # top 4 KiB
    (0b10100, 0, (0x200000 - 32 * KIB, 0x200000)),  # top 32 KiB
    (0b11011, 0, (0, 16 * KIB)),  # bottom 16 KiB
    (0b00000, 1, (0, 0x200000)),  # CMP with nothing selected: all
    (0b00001, 1, (0, 0x1F0000)),  # CMP: lower 31/32
    (0b01001, 1, (0x10000, 0x200000)),  # CMP: upper 31/32
    (0b00111, 1, (0, 0)),  # CMP of all: none
]


@pytest.mark.parametrize("bp, cmp, expected", DATASHEET_ROWS)
def test_protection_decoding_follows_the_datasheet(bp: int, cmp: int, expected: tuple[int, int]) -> None:
    protection = decode(bp << 2, 0x40 if cmp else 0)
    assert (protection.start, protection.end) == expected if expected != (0, 0) else not protection.any


def test_the_driver_and_the_simulated_chip_agree_on_every_protection_setting() -> None:
    chip = GD25Chip()
    for bp in range(32):
        for cmp in (0, 0x40):
            chip.sr1, chip.sr2 = bp << 2, cmp
            ours = decode(chip.sr1, chip.sr2)
            theirs = chip.protected_range()
            assert ((ours.start, ours.end) if ours.any else (0, 0)) == theirs, (bp, cmp)


def test_wp_status_and_disable(make_board) -> None:
    board = make_board(sr1=0x80 | 0x04 | 0x08, sr2=0x40 | 0x02)  # SRP0, BP0, BP1, CMP, QE
    status = board.run("wp", "status")
    assert status.exit_code == 0, status.stderr
    assert status.stdout.splitlines() == [
        "SR1=0x8c SR2=0x42: BP4..BP0=00011 CMP=1 SRP0=1 SRP1=0",
        "protected range: 0x000000-0x1bffff (1792 KiB)",
    ]
    refused = board.run("wp", "disable")
    assert refused.exit_code == 1 and "without --yes" in refused.stderr
    assert board.state().sr1 == 0x8C
    result = board.run("wp", "disable", "--yes")
    assert result.exit_code == 0, result.stderr
    state = board.state()
    assert (state.sr1, state.sr2) == (0x80, 0x02), "BP and CMP cleared; SRP0 and QE kept"
    assert board.run("wp", "status").stdout.splitlines()[1] == "protected range: none"
    board.assert_registers_restored()


def test_wp_disable_reports_a_chip_that_ignores_it(make_board) -> None:
    board = make_board(sr1=0x04, faults=Faults(wel_never_sets=True))
    result = board.run("wp", "disable", "--yes")
    assert result.exit_code == 1 and "WREN failed" in result.stderr


class FillingDisk(io.StringIO):
    """A log file on a disk that fills up after `room` writes: every later write or flush fails with ENOSPC."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, text: str) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= 1
        return super().write(text)

    def flush(self) -> None:
        pass  # the write itself fails: nothing is left to flush


def test_a_log_whose_disk_fills_mid_flash_does_not_lose_the_resume_hint(
    make_board, random_image, tmp_path: Path, monkeypatch
) -> None:
    board = make_board(random_image(33))
    path = tmp_path / "image.bin"
    path.write_bytes(random_image(34))
    log = tmp_path / "flash.log"
    monkeypatch.setattr("tg.flash.recovery.open_log", lambda _path: FillingDisk(room=3))  # header + 2 sector lines
    result = board.run("flash", str(path), "--start-sector", "20", "--sector-count", "5", "--yes", "--log", str(log))
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    # sector 22 was written and verified; its log line was the one that did not fit
    assert lines[0] == "last good sector: 022 @0x16000"
    assert lines[1].endswith("flash " + shlex.quote(str(path)) + " --start-sector 23 --sector-count 2 --yes")
    assert lines[2] == f"warning: log {log}: No space left on device; the lines above are not in the log"
    assert lines[-1] == f"error: [Errno 28] log {log}: No space left on device"
    board.assert_registers_restored()
