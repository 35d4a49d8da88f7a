"""tg-flash through the simulated ASM24 USB bridge (the seed's path), end to end through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tg.drivers.sim.faults import Faults


def test_sim_init_puts_the_board_behind_the_usb_bridge_by_default(cli, tmp_path: Path) -> None:
    state = tmp_path / "board.sim"
    result = cli("sim", "init", str(state))
    assert result.exit_code == 0 and "(via usb)" in result.stdout
    assert cli("sim", "show", str(state)).stdout.splitlines()[-1] == "reached via: usb"
    result = cli("--transport", "sim", "--sim-state", str(state), "info")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == "JEDEC capture: c8601500 (C8 60 15 detected)"
    assert cli("sim", "init", str(tmp_path / "x.sim"), "--via", "carrier-pigeon").exit_code == 2


def test_flash_a_range_read_and_dump_over_usb(make_board, random_image, tmp_path: Path) -> None:
    original, image = random_image(7), random_image(8)
    board = make_board(original, via="usb")
    (tmp_path / "image.bin").write_bytes(image)
    result = board.run("flash", str(tmp_path / "image.bin"), "--start-sector", "100", "--sector-count", "3", "--yes")
    assert result.exit_code == 0, result.stderr
    expected = bytearray(original)
    expected[100 * 0x1000 : 103 * 0x1000] = image[100 * 0x1000 : 103 * 0x1000]
    assert board.flash() == bytes(expected)
    result = board.run("read", "0x64000", "16")
    assert result.stdout.strip() == image[0x64000:0x64010].hex()
    board.assert_registers_restored()


def test_a_down_pcie_link_is_one_clear_error(make_board) -> None:
    board = make_board(faults=Faults(usb_link_down=True), via="usb")
    result = board.run("info")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: PCIe link not up (LTSSM state 0x01, expected 0x78)")


def test_stalls_and_bridge_timeouts_are_recovered_transparently(make_board) -> None:
    board = make_board(faults=Faults(usb_stall_at=[5, 40, 90], usb_tlp_timeout_at=[3, 60, 200]), via="usb")
    result = board.run("info")
    assert result.exit_code == 0, result.stderr
    assert "CMP=clear" in result.stdout


def test_a_request_the_bridge_keeps_refusing_is_one_clear_error(make_board) -> None:
    # A stalled control request is sent once more; when that is stalled too, the command fails with the stall.
    board = make_board(faults=Faults(usb_stall_at=list(range(150, 400))), via="usb")
    result = board.run("info")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[-1].startswith("error: the bridge refused control request 0xf0 (STALL, twice)")
    assert lines[0].startswith("warning: simulator: controller registers not restored"), "the link died mid-way"


def test_sim_init_usb_fault_options(cli, tmp_path: Path) -> None:
    down, flaky = tmp_path / "down.sim", tmp_path / "flaky.sim"
    assert cli("sim", "init", str(down), "--link-down").exit_code == 0
    result = cli("--transport", "sim", "--sim-state", str(down), "info")
    assert result.exit_code == 1 and "PCIe link not up" in result.stderr
    assert cli("sim", "init", str(flaky), "--usb-stall", "7", "--tlp-timeout", "0x20").exit_code == 0
    result = cli("--transport", "sim", "--sim-state", str(flaky), "info")
    assert result.exit_code == 0, result.stderr


def test_usb_transport_with_libusb_but_no_bridge(cli, monkeypatch) -> None:
    """The real USB path as far as this machine allows: libusb (from the libusb-package wheel) enumerates, finds
    no ASM24 bridge, and the command says so."""
    libusb_package = pytest.importorskip("libusb_package")
    monkeypatch.setenv("USB_1_0_PATH", str(libusb_package.get_library_path()))
    result = cli("--transport", "usb", "info")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: no supported usb AMD GPU found (no ASM24 bridge with ids 3801:0001 or add1:0001)"
    )


def test_fw_probe_over_usb(make_board) -> None:
    board = make_board(via="usb")
    result = board.run("fw", "probe")
    assert result.exit_code == 0, result.stderr
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [
        "boot_partition",
        "fb_state",
        "model_id",
        "transfer_type",
    ]
