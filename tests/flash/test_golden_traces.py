"""Golden register-access traces: any change to the hardware programming sequence shows up as a diff.

The goldens in tests/flash/golden/ are plain text, one register access per line (reads without their
values, writes with them). They are generated from the seed's sequence as the specification states it
(tests/flash/seed_sequence.py), never from tg's own output:

    uv run python tests/flash/seed_sequence.py
"""

from __future__ import annotations

import difflib
import random
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


def load_seed_model():
    """tests/flash/seed_sequence.py (the test suite imports in importlib mode, so load it by path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("seed_sequence", Path(__file__).parent / "seed_sequence.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SECTOR = 0x1000


def deterministic_image() -> bytes:
    return random.Random(1234).randbytes(0x200000)


def one_sector_image(original: bytes) -> bytes:
    """Sector 5 gets new data in two pages and is erased elsewhere; every other sector stays."""
    image = bytearray(original)
    rng = random.Random(99)
    sector = bytearray(b"\xff" * SECTOR)
    sector[0x000:0x100] = rng.randbytes(0x100)
    sector[0x300:0x340] = rng.randbytes(0x40)
    image[5 * SECTOR : 6 * SECTOR] = sector
    return bytes(image)


def normalized(trace: str) -> str:
    """Drop the values of reads: they come from the chip, the sequence is what the goldens pin down."""
    lines = []
    for line in trace.splitlines():
        parts = line.split()
        if parts and parts[0] in ("R32", "RB"):
            label = line.rsplit("  ", 1)[1] if "  " in line else ""
            line = f"{parts[0]:<3} {parts[1]}  {label}".rstrip()
        lines.append(line)
    return "\n".join(lines) + "\n"


def compare_with_golden(name: str, trace: str) -> None:
    path = GOLDEN / f"{name}.trace"
    trace = normalized(trace)
    expected = path.read_text()
    if trace != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), trace.splitlines(), f"golden/{name}.trace", "this run", lineterm="", n=2
        )
        shown = "\n".join(list(diff)[:80])
        pytest.fail(f"register trace of `{name}` differs from the seed's sequence:\n{shown}")


def session_trace(board) -> str:
    text = board.trace_text()
    assert text.startswith("# session 1\n")
    return text


VIAS = pytest.mark.parametrize("via", ["usb", "pci"])


@VIAS
def test_info_trace_matches_golden(make_board, via: str) -> None:
    board = make_board(deterministic_image(), trace=True, busy_scale=0.0, via=via)
    assert board.run("info").exit_code == 0
    compare_with_golden("info", session_trace(board))


@VIAS
def test_read_trace_matches_golden(make_board, via: str) -> None:
    board = make_board(deterministic_image(), trace=True, busy_scale=0.0, via=via)
    assert board.run("read", "0", "0x40").exit_code == 0
    compare_with_golden("read_0_0x40", session_trace(board))


@VIAS
def test_one_sector_flash_trace_matches_golden(make_board, tmp_path: Path, via: str) -> None:
    original = deterministic_image()
    image = one_sector_image(original)
    board = make_board(original, trace=True, busy_scale=0.0, via=via)
    path = tmp_path / "image.bin"
    path.write_bytes(image)
    result = board.run("flash", str(path), "--start-sector", "5", "--sector-count", "1", "--yes")
    assert result.exit_code == 0, result.stderr
    assert board.flash() == image
    compare_with_golden("flash_sector_5", session_trace(board))


def test_a_changed_restore_order_fails_with_a_diff(make_board, monkeypatch) -> None:
    from tg.drivers import navi31_regs as regs
    from tg.flash.spi import Navi31SPI

    def restore_in_another_order(self, saved) -> None:
        for offset, value in (
            (regs.ROM_SW_CNTL, 0),
            (regs.ROM_SW_STATUS, 0),
            (regs.GPIO_PAD_MASK, saved.gpio_mask),
            (regs.GPIO_PAD_A, saved.gpio_a),
            (regs.GPIO_PAD_EN, saved.gpio_en),
            (regs.PAGE_MIRROR_CNTL, saved.page_mirror),
            (regs.ROM_CNTL, saved.rom_cntl),
        ):
            self.mmio.write32(offset, value)

    monkeypatch.setattr(Navi31SPI, "_give_back_pins", restore_in_another_order)
    board = make_board(deterministic_image(), trace=True, busy_scale=0.0)
    assert board.run("read", "0", "0x40").exit_code == 0  # every register still ends restored ...
    expected_diff = r"(?s)differs.*-W32 05a380 18000003  ROM_CNTL.*\+W32 05a504 00000f80  GPIO_PAD_MASK"
    with pytest.raises(pytest.fail.Exception, match=expected_diff):
        compare_with_golden("read_0_0x40", session_trace(board))  # ... but the sequence differs


def test_goldens_are_the_seed_sequence() -> None:
    """The committed goldens equal what the seed model generates, so nobody can regenerate them from tg."""
    seed = load_seed_model()

    image = one_sector_image(deterministic_image())
    assert (GOLDEN / "info.trace").read_text() == seed.golden_text(seed.info_trace())
    assert (GOLDEN / "read_0_0x40.trace").read_text() == seed.golden_text(seed.read_trace())
    expected = seed.golden_text(seed.flash_sector_trace(5, image[5 * SECTOR : 6 * SECTOR]))
    assert (GOLDEN / "flash_sector_5.trace").read_text() == expected


def test_tg_differs_from_seed_prescaler_restored_and_sector_read_first() -> None:
    """tg's two deliberate departures from the seed's sequence, stated: it restores ROM_CNTL after setting
    the prescaler (the seed leaves it), and reads a sector before erasing it (to skip unchanged sectors)."""
    seed = load_seed_model()

    image = one_sector_image(deterministic_image())
    data = image[5 * SECTOR : 6 * SECTOR]
    pure = seed.flash_sector_trace(5, data, pre_read=False)
    ours = seed.flash_sector_trace(5, data, pre_read=True)
    one_read = seed.SeedModel()
    one_read.transfer(0x03, address=5 * SECTOR, address_len=3, data_in=0x100)
    pre_read = 32 * len(one_read.lines)  # 16 chunks of 256 bytes, each issued twice
    diverge = next(i for i, (a, b) in enumerate(zip(ours, pure, strict=False)) if a != b)
    assert ours[:diverge] == pure[:diverge] and ours[diverge + pre_read :] == pure[diverge:]
    model = seed.SeedModel(restore_prescaler=False)
    model.open()
    model.close()
    assert model.lines == ["R32 05a380  ROM_CNTL", "W32 05a380 18000003  ROM_CNTL"]
