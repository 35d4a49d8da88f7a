"""PCI enumeration and BAR mapping against a fake /sys/bus/pci/devices tree in a temporary folder."""

from pathlib import Path

import pytest

from tg.drivers.pci import DeviceMatch, scan_pci
from tg.drivers.transport import BoardRequest, Transport, TransportError, open_board

NAVI31 = (DeviceMatch(0xFFFF, (0x744C,)),)


def add_device(root: Path, address: str, vendor: int, device: int, bar5: bytes | None = None) -> Path:
    path = root / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(f"0x{vendor:04x}\n")
    (path / "device").write_text(f"0x{device:04x}\n")
    if bar5 is not None:
        (path / "resource5").write_bytes(bar5)
    return path


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "devices"
    add_device(root, "0000:03:00.0", 0x1002, 0x744C, bar5=bytes(range(256)) * 16)
    add_device(root, "0000:00:02.0", 0x8086, 0x744C)  # right device id, wrong vendor
    add_device(root, "0000:04:00.0", 0x1002, 0x73BF)  # an AMD GPU that is not Navi31
    add_device(root, "0000:07:00.0", 0x1002, 0x744C, bar5=b"")
    (root / "0000:09:00.0").mkdir()  # a half-removed device with no id files
    return root


def test_scan_filters_by_vendor_and_masked_device_id(sysfs: Path) -> None:
    found = scan_pci(0x1002, NAVI31, sysfs)
    assert [d.address for d in found] == ["0000:03:00.0", "0000:07:00.0"]
    assert found[0].vendor_id == 0x1002 and found[0].device_id == 0x744C


def test_a_mask_matches_a_family_of_device_ids(sysfs: Path) -> None:
    family = (DeviceMatch(0xFF00, (0x7300,)),)
    assert [d.address for d in scan_pci(0x1002, family, sysfs)] == ["0000:04:00.0"]


def test_missing_sysfs_root_finds_nothing(tmp_path: Path) -> None:
    assert scan_pci(0x1002, NAVI31, tmp_path / "absent") == []


def test_map_bar_maps_the_resource_file(sysfs: Path) -> None:
    device = scan_pci(0x1002, NAVI31, sysfs)[0]
    mmio = device.map_bar(5)
    assert mmio.size == 4096
    assert mmio.read32(0x10) == int.from_bytes(bytes([16, 17, 18, 19]), "little")
    mmio.write32(0x20, 0xDEADBEEF)
    del mmio
    device.close()
    assert (sysfs / "0000:03:00.0" / "resource5").read_bytes()[0x20:0x24] == bytes.fromhex("efbeadde")


def test_map_bar_explains_a_missing_or_empty_bar(sysfs: Path) -> None:
    first, empty = scan_pci(0x1002, NAVI31, sysfs)
    with pytest.raises(OSError, match="kernel driver unbound"):
        first.map_bar(0)
    with pytest.raises(OSError, match="is empty"):
        empty.map_bar(5)
    with pytest.raises(ValueError):
        first.map_bar(6)


def request(transport: Transport, index: int, root: Path, sim_state: Path | None = None) -> BoardRequest:
    return BoardRequest(transport, index, 0x1002, NAVI31, 5, sim_state, sysfs_root=root)


def test_pci_transport_opens_the_indexed_device(sysfs: Path) -> None:
    with open_board(request(Transport.PCI, 0, sysfs)) as board:
        assert board.description == "pci 0000:03:00.0"
        assert board.mmio.read(0, 4) == bytes([0, 1, 2, 3])


def test_index_out_of_range_and_no_device_are_clear_errors(sysfs: Path, tmp_path: Path) -> None:
    with pytest.raises(TransportError, match=r"device index 2 out of range \(found 2\)"):
        open_board(request(Transport.PCI, 2, sysfs))
    with pytest.raises(TransportError, match="no supported AMD GPU found"):
        open_board(request(Transport.AUTO, 0, tmp_path / "empty"))


def test_native_pci_refuses_while_a_kernel_driver_is_bound(sysfs: Path, tmp_path: Path) -> None:
    """Issue 20: the native path checks whether amdgpu is still bound, names it and says how to unbind."""
    drivers = tmp_path / "drivers" / "amdgpu"
    drivers.mkdir(parents=True)
    (sysfs / "0000:03:00.0" / "driver").symlink_to(drivers)
    with pytest.raises(TransportError) as caught:
        open_board(request(Transport.PCI, 0, sysfs))
    message = str(caught.value)
    assert "kernel driver amdgpu is bound to 0000:03:00.0" in message
    assert "echo 0000:03:00.0 > /sys/bus/pci/drivers/amdgpu/unbind" in message
    assert "unvalidated on hardware" in message


def test_native_pci_says_it_is_unvalidated(sysfs: Path) -> None:
    with open_board(request(Transport.PCI, 0, sysfs)) as board:
        assert any("unvalidated on hardware" in w for w in board.warnings)
