"""The generator on a committed set of real headers from the machine, each checked against gcc: record layouts,
every integer constant, function-like macros called with integers, and records passed and returned by value.

The headers are those of a fresh Debian 12 with linux-libc-dev, libc6-dev and libusb-1.0-0-dev (which .ci/run
installs), plus a few library headers used when present; a header that is not installed is skipped by name.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tg.autogen import oracle
from tg.autogen.generate import Options, generate

_MULTIARCH = f"/usr/include/{os.uname().machine}-linux-gnu"

# (header as #include'd, preprocessor definitions)
SUITE: list[tuple[str, tuple[str, ...]]] = [
    ("linux/input.h", ()),
    ("linux/kvm.h", ()),
    ("linux/bpf.h", ()),
    ("linux/videodev2.h", ()),
    ("linux/ethtool.h", ()),
    ("linux/audit.h", ()),
    ("linux/vhost.h", ()),
    ("linux/nvme_ioctl.h", ()),
    ("linux/spi/spidev.h", ()),
    ("linux/if_ether.h", ()),
    ("linux/perf_event.h", ()),
    ("linux/fs.h", ()),
    ("linux/usbdevice_fs.h", ()),
    ("linux/hidraw.h", ()),
    ("linux/gpio.h", ()),
    ("linux/rtnetlink.h", ()),
    ("linux/uinput.h", ()),
    ("linux/fb.h", ()),
    ("linux/loop.h", ()),
    ("linux/seccomp.h", ()),
    ("linux/userfaultfd.h", ()),
    ("sound/asound.h", ()),
    ("linux/can.h", ()),
    ("linux/btrfs.h", ()),
    ("linux/media.h", ()),
    ("linux/virtio_ring.h", ()),
    ("linux/io_uring.h", ()),
    ("linux/cdrom.h", ()),
    ("linux/rtc.h", ()),
    ("elf.h", ()),
    ("link.h", ("_GNU_SOURCE",)),
    ("sys/stat.h", ("_GNU_SOURCE",)),
    ("sys/socket.h", ("_GNU_SOURCE",)),
    ("netinet/in.h", ("_GNU_SOURCE",)),
    ("termios.h", ("_GNU_SOURCE",)),
    ("sys/epoll.h", ("_GNU_SOURCE",)),
    ("regex.h", ()),
    ("libusb-1.0/libusb.h", ()),
    ("sqlite3.h", ()),
    ("zlib.h", ()),
]


def locate(name: str) -> Path | None:
    for folder in ("/usr/include", _MULTIARCH):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


def test_the_suite_has_at_least_thirty_headers_of_a_fresh_machine():
    fresh = [name for name, _ in SUITE if name not in ("sqlite3.h", "zlib.h")]
    assert len(fresh) >= 30


@pytest.mark.slow
@pytest.mark.parametrize(("name", "defines"), SUITE, ids=[name for name, _ in SUITE])
def test_header_agrees_with_gcc(name, defines, tmp_path):
    path = locate(name)
    if path is None:
        pytest.skip(f"{name} is not installed on this machine")
    generated = generate(Options(name="suite", headers=(str(path),), defines=defines))
    module_path = tmp_path / "suite_module.py"
    module_path.write_text(generated.source)
    spec = importlib.util.spec_from_file_location(f"suite_{path.stem}", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    # Some uapi headers use _IO() and friends without including them (their users include <sys/ioctl.h>).
    prologue = (
        f"#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n#include <linux/ioctl.h>\n#include <{name}>\n"
    )
    flags = [f"-D{d}" for d in defines]
    layouts = [check for record in oracle.records(module) for check in oracle.record_checks(record)]
    macros, unevaluated = oracle.macro_checks(module)
    values = oracle.run_checks(oracle.constant_checks(module) + macros, prologue, flags, tmp_path)
    shapes = oracle.run_checks(layouts, prologue, flags, tmp_path) if layouts else oracle.Outcome()
    calls = oracle.call_checks(module, prologue, flags, tmp_path)

    assert not shapes.mismatches, shapes.mismatches[:10]
    assert not shapes.dropped, shapes.dropped[:10]
    assert not values.mismatches, values.mismatches[:10]
    assert not calls.mismatches, calls.mismatches[:10]
    # gcc rejects a few lines only where the Python side is not C (reported so that a trend shows).
    assert len(values.dropped) <= max(3, values.checked // 50), values.dropped[:10]
    assert not calls.dropped, calls.dropped[:10]
    # Every object-like macro of the header that is an integer constant expression in C is bound, as an int.
    constants = oracle.integer_constant_macros(path, prologue, flags, tmp_path)
    missing = [n for n in constants if not isinstance(getattr(module, n, None), int)]
    assert not missing, missing[:20]
    print(
        f"{name}: {shapes.checked} layout, {values.checked} value, {calls.checked} call checks; "
        f"{len(values.dropped)} dropped, {len(unevaluated)} macros need non-integer arguments, "
        f"all {len(constants)} integer constant macros bound"
    )
