"""The device-parametrized tensor tests compare the CPU, the PYTHON reference and the default device: under
`DEV=MOCKKFD+AMD` their kernels run on the simulated GPU too (issue 31 item 5), with no device named twice."""

from __future__ import annotations

from tg.hcq import Device

from .devices import DEVICES


def test_the_default_device_is_among_the_compared_ones_once() -> None:
    assert DEVICES[:2] == ["CPU", "PYTHON"] and Device.DEFAULT in DEVICES and len(set(DEVICES)) == len(DEVICES)
