"""`--transport auto` never falls back to native PCI for a command that writes (issue 36 item 3): with no USB
bridge it refuses before touching anything, while read-only commands may still use PCI and an explicit
`--transport pci` may write."""

from __future__ import annotations

from pathlib import Path

import pytest

from tg.drivers import transport, usb
from tg.drivers.transport import TransportError


@pytest.fixture
def no_bridge_but_pci(monkeypatch) -> list[bool]:
    """No ASM24 bridge; a native PCI board that records whether anything opened it (and then fails to map)."""
    opened: list[bool] = []
    monkeypatch.setattr(usb, "list_devices", lambda ids: [])

    def open_pci(request):
        opened.append(request.writes)
        raise TransportError("native PCI reached")

    monkeypatch.setattr(transport, "_open_pci", open_pci)
    return opened


WRITES = [
    ("flash", "{image}", "--yes"),
    ("flash", "{image}", "--start-sector", "3", "--sector-count", "1", "--yes"),
    ("wp", "disable", "--yes"),
    ("fw", "ifwi-all", "{image}", "--yes"),
]


@pytest.mark.parametrize("command", WRITES, ids=lambda c: " ".join(c[:2]))
def test_auto_refuses_native_pci_for_writes(cli, no_bridge_but_pci, random_image, tmp_path: Path, command) -> None:
    image = tmp_path / "image.bin"
    image.write_bytes(random_image(40))
    args = [part.format(image=image) for part in command]
    args += ["--log", str(tmp_path / "log")] if args[0] == "flash" else []
    result = cli("--transport", "auto", *args)
    assert result.exit_code == 1
    assert "--transport auto does not fall back to native PCI for a command that writes" in result.stderr
    assert "pass --transport pci to use it anyway" in result.stderr
    assert no_bridge_but_pci == [], "native PCI was never opened"


def test_auto_may_read_over_native_pci_and_pci_may_write_when_named(
    cli, no_bridge_but_pci, random_image, tmp_path: Path
) -> None:
    result = cli("--transport", "auto", "info")
    assert result.exit_code == 1 and "native PCI reached" in result.stderr
    image = tmp_path / "image.bin"
    image.write_bytes(random_image(41))
    result = cli("--transport", "pci", "flash", str(image), "--yes", "--log", str(tmp_path / "log"))
    assert result.exit_code == 1 and "native PCI reached" in result.stderr
    assert no_bridge_but_pci == [False, True]
