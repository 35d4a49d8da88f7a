"""Mutation check for tg-flash's safety-critical steps: each mutation removes one step from the driver, runs
the tests that guard it and must see at least one of them fail. Not collected by pytest (it edits the
source); run it by hand or in CI:

    uv run python tests/flash/mutation_check.py

Every edited file is restored afterwards, also on Ctrl-C. Exit 1 if any mutation survived.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLASH = ROOT / "tools" / "flash" / "tg" / "flash"


@dataclass(frozen=True)
class Mutation:
    name: str
    path: Path
    original: str
    mutated: str
    tests: tuple[str, ...]


MUTATIONS = [
    Mutation(
        "remove WREN before program/erase/status write",
        FLASH / "gd25.py",
        "        self.spi.transfer(WRITE_ENABLE)\n",
        "        pass  # mutation: no WREN\n",
        ("tests/flash/test_spi_driver.py", "tests/flash/test_golden_traces.py", "tests/flash/test_recovery.py"),
    ),
    Mutation(
        "remove the ROM_SW DONE poll",
        FLASH / "spi.py",
        "        wait_until(lambda: mmio.read32(regs.ROM_SW_STATUS) & regs.STATUS_DONE, self.timeout, message)\n",
        "        pass  # mutation: no DONE poll\n",
        ("tests/flash/test_spi_driver.py", "tests/flash/test_golden_traces.py", "tests/flash/test_cli_flash.py"),
    ),
    Mutation(
        "remove the PSP mailbox ready check",
        FLASH / "psp.py",
        "        if not status & READY:\n",
        "        if False:  # mutation: no ready check\n",
        ("tests/flash/test_sim_realism.py", "tests/flash/test_cli_fw.py"),
    ),
    Mutation(
        "remove the GPIO_PAD_A restore after a ROM_SW transaction",
        FLASH / "spi.py",
        "        mmio.write32(regs.GPIO_PAD_A, saved.gpio_a)\n",
        "        pass  # mutation: GPIO_PAD_A not restored\n",
        ("tests/flash/test_spi_driver.py", "tests/flash/test_golden_traces.py", "tests/flash/test_cli_flash.py"),
    ),
    Mutation(
        "remove the ROM_CNTL restore after an aperture dump",
        FLASH / "aperture.py",
        "            mmio.write32(regs.ROM_CNTL, bswap32(original_cntl))\n",
        "            pass  # mutation: ROM_CNTL not restored\n",
        ("tests/flash/test_cli_fw.py",),
    ),
]


def run_tests(tests: tuple[str, ...]) -> tuple[int, str]:
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    failed = re.findall(r"^FAILED (\S+)", done.stdout, re.MULTILINE)
    return done.returncode, failed[0] if failed else ""


def main() -> int:
    survivors = 0
    for mutation in MUTATIONS:
        source = mutation.path.read_text()
        if source.count(mutation.original) != 1:
            print(f"SKIPPED  {mutation.name}: the line to mutate is not in {mutation.path.name} exactly once")
            survivors += 1
            continue
        started = time.monotonic()
        try:
            mutation.path.write_text(source.replace(mutation.original, mutation.mutated))
            returncode, first_failure = run_tests(mutation.tests)
        finally:
            mutation.path.write_text(source)
        seconds = time.monotonic() - started
        if returncode == 0:
            survivors += 1
            print(f"SURVIVED {mutation.name} ({seconds:.0f}s): no test failed")
        else:
            print(f"KILLED   {mutation.name} ({seconds:.0f}s): {first_failure or f'pytest exit {returncode}'}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
