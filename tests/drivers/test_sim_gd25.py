"""The GD25LQ16E chip model against the datasheet rules, driven with raw SPI byte streams."""

import types

import pytest

from tg.drivers.sim import gd25
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import FLASH_SIZE, GD25Chip


def addr(a: int) -> bytes:
    return a.to_bytes(3, "big")


def wait_ready(chip: GD25Chip) -> None:
    """Poll SR1 until BUSY clears."""
    while chip.transact(b"\x05", 1)[0] & 1:
        pass


class SimulatedClock:
    """The chip model's clock, moved by the test (and by `step` seconds at every look), so that a loaded machine
    cannot stretch or shrink a busy time."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step = 1000.0, step

    def time(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimulatedClock:
    clock = SimulatedClock()
    monkeypatch.setattr(gd25, "time", types.SimpleNamespace(time=clock.time))
    return clock


def test_program_only_clears_bits_and_needs_wel() -> None:
    chip = GD25Chip(bytearray(b"\xf0" * FLASH_SIZE))
    chip.transact(b"\x02" + addr(0x10) + b"\x3c", 0)  # no WREN: ignored
    assert chip.data[0x10] == 0xF0
    chip.transact(b"\x06", 0)
    assert chip.transact(b"\x05", 1)[0] & 0x02
    chip.transact(b"\x02" + addr(0x10) + b"\x3c", 0)
    wait_ready(chip)
    assert chip.data[0x10] == 0x30 and not chip.sr1 & 0x02  # AND, and WEL cleared


def test_program_wraps_inside_its_page() -> None:
    chip = GD25Chip()
    chip.transact(b"\x06", 0)
    chip.transact(b"\x02" + addr(0x1FE) + b"\x01\x02\x03\x04", 0)
    assert chip.data[0x1FE:0x200] == b"\x01\x02" and chip.data[0x100:0x102] == b"\x03\x04"
    assert chip.data[0x200] == 0xFF


def test_sector_erase_sets_ff_on_the_aligned_sector_only(clock: SimulatedClock) -> None:
    chip = GD25Chip(bytearray(FLASH_SIZE))
    chip.busy_scale = 0.2  # 10 ms of the datasheet's typical 50 ms sector erase
    chip.transact(b"\x06", 0)
    chip.transact(b"\x20" + addr(0x1234), 0)
    clock.step = 0.001  # each status poll is 1 ms later
    started = clock.now
    wait_ready(chip)
    assert 0.009 <= clock.now - started <= 0.012
    assert chip.data[0x1000:0x2000] == b"\xff" * 0x1000
    assert chip.data[0xFFF] == 0 and chip.data[0x2000] == 0


def test_a_busy_chip_ignores_everything_but_status_reads(clock: SimulatedClock) -> None:
    """On the simulated clock (frozen here), so the erase is still running at the last command. A regression: on
    the wall clock the erase's 0.5 ms (50 ms scaled by 0.01) had ended by then under load, and WEL was set (CI)."""
    chip = GD25Chip(bytearray(FLASH_SIZE))
    chip.transact(b"\x06", 0)
    chip.transact(b"\x20" + addr(0), 0)
    assert chip.transact(b"\x03" + addr(0), 4) == b"\xff" * 4  # bus floats while busy
    chip.transact(b"\x06", 0)
    assert not chip.sr1 & 0x02


@pytest.mark.parametrize(
    "sr1, sr2, protected, free",
    [
        (0x00, 0x40, [0x0, 0x1FF000], []),  # CMP with BP=0: the whole array
        (0x04, 0x00, [0x1F0000], [0x1EF000, 0x0]),  # BP0: upper 64 KiB
        (0x04, 0x40, [0x0, 0x1EF000], [0x1F0000]),  # CMP inverts it
        (0x24, 0x00, [0x0], [0x10000]),  # BP3 (TB) + BP0: lower 64 KiB
        (0x44, 0x00, [0x1FF000], [0x1FE000]),  # BP4 (SEC) + BP0: upper 4 KiB
        (0x18, 0x00, [0x0, 0x1FF000], []),  # BP2+BP1: everything
    ],
)
def test_protection_silently_ignores_erase(sr1: int, sr2: int, protected: list, free: list) -> None:
    chip = GD25Chip(bytearray(FLASH_SIZE))
    chip.sr1, chip.sr2 = sr1, sr2
    for sector in protected + free:
        chip.transact(b"\x06", 0)
        chip.transact(b"\x20" + addr(sector), 0)
        wait_ready(chip)
    for sector in protected:
        assert chip.data[sector] == 0x00, hex(sector)
    for sector in free:
        assert chip.data[sector] == 0xFF, hex(sector)


def test_write_status_keeps_readonly_bits_and_lock_bits_are_one_time() -> None:
    chip = GD25Chip()
    chip.transact(b"\x06", 0)
    chip.transact(b"\x01\xff\xcb", 0)  # try to set BUSY/WEL and SUS; set SRP1, QE, LB1 and CMP
    wait_ready(chip)
    assert chip.sr1 == 0xFC and chip.sr2 == 0x4B
    chip.transact(b"\x06", 0)
    chip.transact(b"\x01\x00\x00", 0)
    wait_ready(chip)
    assert chip.sr1 == 0x00 and chip.sr2 == 0x08  # LB1 stays set


def test_identification_commands() -> None:
    chip = GD25Chip()
    assert chip.transact(b"\x9f", 4) == bytes.fromhex("c8601500")
    assert chip.transact(b"\x90" + addr(0), 2) == bytes.fromhex("c814")
    sfdp = chip.transact(b"\x5a" + addr(0) + b"\x00", 4)
    assert sfdp == b"SFDP"
    assert chip.transact(b"\x5a" + addr(0), 5) == b"\xffSFDP"  # the dummy byte clocked in as data


def test_fault_switches() -> None:
    chip = GD25Chip(faults=Faults(wel_never_sets=True))
    chip.transact(b"\x06", 0)
    assert not chip.sr1 & 0x02
    chip = GD25Chip(faults=Faults(busy_forever=True, stuck_bits={5: 0x01}))
    chip.transact(b"\x06", 0)
    chip.transact(b"\x02" + addr(5) + b"\x00", 0)
    assert chip.data[5] == 0x01
    assert all(chip.transact(b"\x05", 1)[0] & 1 for _ in range(100))


def test_busy_is_time_based_not_counted_in_polls(clock: SimulatedClock) -> None:
    """Regression (issue 20): BUSY counted in polls and saved in the state file bricked the board after one
    Ctrl-C mid-erase. BUSY is now a deadline: without a single status poll the chip is idle once it passes."""
    chip = GD25Chip(bytearray(FLASH_SIZE))
    chip.busy_scale = 0.1  # 5 ms
    chip.transact(b"\x06", 0)
    chip.transact(b"\x20" + addr(0), 0)
    assert chip.transact(b"\x9f", 3) == b"\xff" * 3, "a busy chip does not answer RDID"
    clock.now += 0.02
    assert chip.transact(b"\x9f", 3) == bytes([0xC8, 0x60, 0x15])
