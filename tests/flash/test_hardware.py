"""Read-only checks on a real Navi31 board (native PCI, kernel driver unbound). Skipped unless TG_HW=1.
They never write: the simulator is where programming is proven."""

from __future__ import annotations

import pytest


@pytest.mark.hw
def test_info_on_real_hardware(cli) -> None:
    result = cli("--transport", "pci", "info")
    assert result.exit_code == 0, result.stderr
    assert "(C8 60 15 detected)" in result.stdout


@pytest.mark.hw
def test_fw_probe_on_real_hardware(cli) -> None:
    result = cli("--transport", "pci", "fw", "probe")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("error=0x") == 4
