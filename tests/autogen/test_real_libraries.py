"""Calls through the committed bindings into real libraries, and ioctl numbers checked against the kernel's
headers compiled by gcc."""

from __future__ import annotations

import ctypes
import errno
import importlib.util
import os
import zlib
from pathlib import Path

import pytest

from tg.autogen.regen import missing_headers
from tg.autogen.targets import TARGETS
from tg.drivers.cbind import find_library


def test_libc_strlen_memcpy_getpid():
    from tg.drivers.autogen import libc

    assert libc.strlen(b"tg-autogen") == 10
    source = ctypes.create_string_buffer(b"payload\x00more", 12)
    target = ctypes.create_string_buffer(12)
    libc.memcpy(target, source, 12)
    assert target.raw == source.raw
    assert libc.getpid() == os.getpid()


def test_libc_mmap_and_munmap_anonymous_memory():
    from tg.drivers.autogen import libc

    size = 2 * os.sysconf("SC_PAGE_SIZE")
    prot = libc.PROT_READ | libc.PROT_WRITE
    address = libc.mmap(None, size, prot, libc.MAP_PRIVATE | libc.MAP_ANONYMOUS, -1, 0)
    assert address not in (None, ctypes.c_void_p(-1).value)
    view = (ctypes.c_ubyte * size).from_address(address)
    view[0], view[size - 1] = 0xAB, 0xCD
    assert (view[0], view[size - 1]) == (0xAB, 0xCD)
    assert libc.munmap(address, size) == 0


def test_libc_errno_after_failed_open():
    from tg.drivers.autogen import libc

    ctypes.set_errno(0)
    assert libc.open(b"/nonexistent/tg-autogen", libc.O_RDONLY) == -1
    assert ctypes.get_errno() == errno.ENOENT == libc.ENOENT


def test_libc_open_with_variadic_mode_and_close(tmp_path):
    from tg.drivers.autogen import libc

    path = tmp_path / "created"
    fd = libc.open(str(path).encode(), libc.O_RDWR | libc.O_CREAT, 0o640)
    assert fd >= 0
    assert libc.write(fd, b"abc", 3) == 3
    assert libc.close(fd) == 0
    assert path.read_bytes() == b"abc" and (path.stat().st_mode & 0o777) == 0o640


libusb_present = pytest.mark.skipif(
    bool(missing_headers(TARGETS["libusb"])) or find_library("usb-1.0") is None,
    reason="libusb-1.0-0-dev is not installed (.ci/run installs it)",
)


@libusb_present
def test_libusb_version_matches_the_c_library(c_program_output):
    from tg.drivers.autogen import libusb

    program = (
        "#include <stdio.h>\n#include <libusb-1.0/libusb.h>\n"
        "int main(void) { const struct libusb_version *v = libusb_get_version();"
        ' printf("%u %u %u %u\\n", v->major, v->minor, v->micro, v->nano); return 0; }\n'
    )
    expected = [int(x) for x in c_program_output(program, ["-lusb-1.0"]).split()]
    version = libusb.libusb_get_version().contents
    assert [version.major, version.minor, version.micro, version.nano] == expected


@libusb_present
def test_libusb_init_list_and_exit_without_devices():
    from tg.drivers.autogen import libusb

    context = ctypes.POINTER(libusb.struct_libusb_context)()
    rc = libusb.libusb_init(ctypes.byref(context))
    assert rc == libusb.LIBUSB_SUCCESS, libusb.libusb_error_name(rc)
    devices = ctypes.POINTER(ctypes.POINTER(libusb.struct_libusb_device))()
    count = libusb.libusb_get_device_list(context, ctypes.byref(devices))
    assert count >= 0
    libusb.libusb_free_device_list(devices, 1)
    libusb.libusb_exit(context)


def test_ioctl_request_numbers_match_the_kernel_headers():
    from tg.drivers.autogen import kfd_ioctl, vfio

    # _IO(';', 100) and _IOR('K', 1, struct kfd_ioctl_get_version_args): values from the kernel's encoding.
    assert vfio.VFIO_GET_API_VERSION == 0x3B64
    assert kfd_ioctl.AMDKFD_IOC_GET_VERSION == 0x80084B01
    assert kfd_ioctl.AMDKFD_IOC_GET_VERSION.argtype is kfd_ioctl.struct_kfd_ioctl_get_version_args


def test_io_uring_layouts_and_syscall_number():
    from tg.drivers.autogen import io_uring

    assert ctypes.sizeof(io_uring.struct_io_uring_sqe) == 64
    assert ctypes.sizeof(io_uring.struct_io_uring_cqe) == 16
    assert io_uring.__NR_io_uring_setup == 425


def test_ioctl_on_a_regular_file_fails_cleanly(tmp_path):
    from tg.drivers.autogen import kfd_ioctl

    path = tmp_path / "not-a-device"
    path.write_bytes(b"")
    with open(path, "rb") as handle, pytest.raises(OSError) as failure:
        kfd_ioctl.AMDKFD_IOC_GET_VERSION(handle.fileno())
    assert failure.value.errno == errno.ENOTTY


def test_pci_constants():
    from tg.drivers.autogen import pci

    assert (pci.PCI_VENDOR_ID, pci.PCI_COMMAND, pci.PCI_STD_NUM_BARS) == (0, 4, 6)


def _generated_module(tmp_path, header: str, lib: str):
    from tg.autogen.generate import Options, generate
    from tg.drivers.cbind import find_library

    if not Path(header).is_file() or find_library(lib) is None:
        pytest.skip(f"{header} or lib{lib} is not installed on this machine")
    path = tmp_path / f"{Path(header).stem}_binding.py"
    path.write_text(generate(Options(name=Path(header).stem, headers=(header,), lib=lib)).source)
    spec = importlib.util.spec_from_file_location(f"binding_{Path(header).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_zlib_deflate_init_macro_passes_the_version_as_bytes(tmp_path):
    zlib_binding = _generated_module(tmp_path, "/usr/include/zlib.h", "z")
    assert isinstance(zlib_binding.ZLIB_VERSION, bytes)
    stream = zlib_binding.z_stream()
    # deflateInit is a macro: deflateInit_(strm, level, ZLIB_VERSION, (int)sizeof(z_stream)).
    assert zlib_binding.deflateInit(ctypes.byref(stream), 6) == zlib_binding.Z_OK
    source = b"tg-autogen " * 50
    output = (ctypes.c_ubyte * 1024)()
    stream.next_in = ctypes.cast(ctypes.c_char_p(source), ctypes.POINTER(ctypes.c_ubyte))
    stream.avail_in = len(source)
    stream.next_out = ctypes.cast(output, ctypes.POINTER(ctypes.c_ubyte))
    stream.avail_out = len(output)
    assert zlib_binding.deflate(ctypes.byref(stream), zlib_binding.Z_FINISH) == zlib_binding.Z_STREAM_END
    assert zlib.decompress(bytes(output[: stream.total_out])) == source
    assert zlib_binding.deflateEnd(ctypes.byref(stream)) == zlib_binding.Z_OK


def test_sqlite_transient_pointer_macro_and_nested_index_records(tmp_path):
    sqlite = _generated_module(tmp_path, "/usr/include/sqlite3.h", "sqlite3")
    assert ctypes.cast(sqlite.SQLITE_TRANSIENT, ctypes.c_void_p).value == 2**64 - 1
    db = ctypes.POINTER(sqlite.sqlite3)()
    assert sqlite.sqlite3_open(b":memory:", ctypes.byref(db)) == sqlite.SQLITE_OK
    statement = ctypes.POINTER(sqlite.sqlite3_stmt)()
    assert sqlite.sqlite3_prepare_v2(db, b"select ?", -1, ctypes.byref(statement), None) == sqlite.SQLITE_OK
    text = ctypes.create_string_buffer(b"hello")
    assert sqlite.sqlite3_bind_text(statement, 1, text, -1, sqlite.SQLITE_TRANSIENT) == sqlite.SQLITE_OK
    text.value = b"XXXXX"  # SQLITE_TRANSIENT made sqlite copy the text
    assert sqlite.sqlite3_step(statement) == sqlite.SQLITE_ROW
    assert ctypes.string_at(sqlite.sqlite3_column_text(statement, 0)) == b"hello"
    sqlite.sqlite3_finalize(statement)
    sqlite.sqlite3_close(db)
    # Records declared inside sqlite3_index_info have their C sizes (they were size-0 classes).
    assert ctypes.sizeof(sqlite.struct_sqlite3_index_constraint) == 12
    assert ctypes.sizeof(sqlite.struct_sqlite3_index_orderby) == 8


def test_pthread_canceled_is_a_pointer(tmp_path):
    pthread = _generated_module(tmp_path, "/usr/include/pthread.h", "c")
    assert isinstance(pthread.PTHREAD_CANCELED, ctypes.c_void_p)
    assert pthread.PTHREAD_CANCELED.value == 2**64 - 1  # ((void *) -1)
