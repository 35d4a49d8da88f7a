"""Read-only checks on a real Navi31 board, over the ASM24 USB bridge (the seed's path) and native PCI (kernel
driver unbound). Skipped unless TG_HW=1. They never write: the simulator is where programming is proven."""

from __future__ import annotations

import pytest

TRANSPORTS = pytest.mark.parametrize("transport", ["usb", "pci"])


@pytest.mark.hw
@TRANSPORTS
def test_info_on_real_hardware(cli, transport: str) -> None:
    result = cli("--transport", transport, "info")
    assert result.exit_code == 0, result.stderr
    assert "(C8 60 15 detected)" in result.stdout


@pytest.mark.hw
@TRANSPORTS
def test_fw_probe_on_real_hardware(cli, transport: str) -> None:
    result = cli("--transport", transport, "fw", "probe")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("error=0x") == 4


@pytest.mark.hw
def test_wp_status_on_real_hardware(cli) -> None:
    result = cli("--transport", "usb", "wp", "status")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[1].startswith("protected range: ")
