"""Mutation check for tg-flash's safety-critical steps and its USB layer: each mutation removes or changes one
step of the driver, runs the tests that guard it and must see at least one of them fail. Not collected by
pytest (it edits the source); run it by hand or in CI:

    uv run python tests/flash/mutation_check.py [NAME-SUBSTRING ...]

The USB-layer mutations run only tests against the simulated bridge (and, for the device open, against a
recorded libusb), never the tests that spell out wire bytes: they show that the simulator, which decodes
the wire format from its own description, disagrees with a driver that gets the protocol wrong.

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
DRIVERS = ROOT / "lib" / "drivers" / "tg" / "drivers"
SIM_USB_TESTS = ("tests/drivers/test_usb_asm24.py", "tests/flash/test_usb_path.py")


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
    Mutation(
        "usb: XDATA/completion reads sent as OUT requests",
        DRIVERS / "usb.py",
        "received = self._control(REQUEST_VENDOR_IN, request",
        "received = self._control(REQUEST_VENDOR_OUT, request",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: streaming modes swapped",
        DRIVERS / "asm24.py",
        "MODE_SINGLE, MODE_STREAM_WRITE, MODE_STREAM_READ = 0, 1, 2\n",
        "MODE_SINGLE, MODE_STREAM_WRITE, MODE_STREAM_READ = 0, 2, 1\n",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: TLP address and value big-endian",
        DRIVERS / "asm24.py",
        'TLP_REQUEST = struct.Struct("<III")',
        'TLP_REQUEST = struct.Struct(">III")',
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: GPU memory decoding enabled before its BAR is sized",
        DRIVERS / "asm24.py",
        "    bar_register = PCI_BAR0 + 4 * bar\n",
        "    ctrl.pcie_cfg_req(PCI_COMMAND, GPU_BUS, value=PCI_COMMAND_ENABLE, size=1)\n"
        "    bar_register = PCI_BAR0 + 4 * bar\n",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: bridge status of a completion unchecked (no retry)",
        DRIVERS / "asm24.py",
        "            if bridge_status == 0:\n",
        "            if True:  # mutation: bridge status unchecked\n",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: completion status unchecked",
        DRIVERS / "asm24.py",
        "        if status:\n",
        "        if False:  # mutation: completion status unchecked\n",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: completion status read from the wrong byte",
        DRIVERS / "asm24.py",
        "raw[4] >> 5 & 0x7, raw[7]",
        "raw[5] >> 5 & 0x7, raw[7]",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: bus numbers written as three bytes",
        DRIVERS / "asm24.py",
        "        ctrl.pcie_cfg_req(PCI_PRIMARY_BUS, bus, value=bus | (bus + 1) << 8 | GPU_BUS << 16, size=4)\n",
        "        for i, number in enumerate((bus, bus + 1, GPU_BUS)):\n"
        "            ctrl.pcie_cfg_req(PCI_PRIMARY_BUS + i, bus, value=number, size=1)\n",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: XDATA write with address and value swapped",
        DRIVERS / "asm24.py",
        "control_write(XDATA_WRITE, value=address + i, index=byte)",
        "control_write(XDATA_WRITE, value=byte, index=address + i)",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: configuration writes treated as posted (completion never read)",
        DRIVERS / "asm24.py",
        "    return fmt_type & 0xDF == FMT_MEM_WRITE or fmt_type & 0xB8 == 0x30\n",
        "    return bool(fmt_type & 0x40)  # mutation: every write posted\n",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: streaming read announces bytes instead of dwords",
        DRIVERS / "asm24.py",
        "address + start, size // 4, MODE_STREAM_READ)",
        "address + start, size, MODE_STREAM_READ)",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: PCIe never powered on",
        DRIVERS / "asm24.py",
        "            self.set_pcie_power(True)\n",
        "            pass  # mutation: no power-on\n",
        SIM_USB_TESTS,
    ),
    Mutation(
        "usb: device opened without selecting configuration 1",
        DRIVERS / "usb.py",
        '        _check(lib.libusb_set_configuration(handle, CONFIGURATION), "selecting configuration 1")\n',
        "        pass  # mutation: no set_configuration\n",
        ("tests/drivers/test_usb_libusb.py",),
    ),
]


def run_tests(tests: tuple[str, ...]) -> tuple[int, str]:
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    failed = re.findall(r"^FAILED (\S+)", done.stdout, re.MULTILINE)
    return done.returncode, failed[0] if failed else ""


def main(selected: list[str]) -> int:
    survivors = 0
    for mutation in [m for m in MUTATIONS if not selected or any(word in m.name for word in selected)]:
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
    sys.exit(main(sys.argv[1:]))
