"""Golden register-access traces: any change to the hardware programming sequence shows up as a diff.

The goldens in tests/flash/golden/ are plain text, one register access per line. After a deliberate
change to the sequence, regenerate them and review the diff before committing:

    TG_UPDATE_GOLDEN=1 uv run pytest tests/flash/test_golden_traces.py
"""

from __future__ import annotations

import difflib
import os
import random
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
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


def compare_with_golden(name: str, trace: str) -> None:
    path = GOLDEN / f"{name}.trace"
    if os.environ.get("TG_UPDATE_GOLDEN") == "1":
        path.write_text(trace)
        return
    expected = path.read_text()
    if trace != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), trace.splitlines(), f"golden/{name}.trace", "this run", lineterm="", n=2
        )
        shown = "\n".join(list(diff)[:80])
        pytest.fail(f"register trace of `{name}` changed (TG_UPDATE_GOLDEN=1 regenerates it):\n{shown}")


def session_trace(board) -> str:
    text = board.trace_text()
    assert text.startswith("# session 1\n")
    return text


def test_info_trace_matches_golden(make_board) -> None:
    board = make_board(deterministic_image(), trace=True)
    assert board.run("info").exit_code == 0
    compare_with_golden("info", session_trace(board))


def test_read_trace_matches_golden(make_board) -> None:
    board = make_board(deterministic_image(), trace=True)
    assert board.run("read", "0", "0x40").exit_code == 0
    compare_with_golden("read_0_0x40", session_trace(board))


def test_one_sector_flash_trace_matches_golden(make_board, tmp_path: Path) -> None:
    original = deterministic_image()
    image = one_sector_image(original)
    board = make_board(original, trace=True)
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
    monkeypatch.delenv("TG_UPDATE_GOLDEN", raising=False)
    board = make_board(deterministic_image(), trace=True)
    assert board.run("read", "0", "0x40").exit_code == 0  # every register still ends restored ...
    expected_diff = r"(?s)changed.*-W32 05a380 18000003  ROM_CNTL.*\+W32 05a504 00000f80  GPIO_PAD_MASK"
    with pytest.raises(pytest.fail.Exception, match=expected_diff):
        compare_with_golden("read_0_0x40", session_trace(board))  # ... but the sequence differs
