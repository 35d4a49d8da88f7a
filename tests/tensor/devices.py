"""The devices the tensor tests compare across: the CPU, the PYTHON reference, and the default device when it is
another one (`DEV=MOCKKFD+AMD`: every kernel of those tests also runs on the simulated GPU and must give the same
values)."""

from __future__ import annotations

from tg.hcq import Device

DEVICES = list(dict.fromkeys(["CPU", "PYTHON", Device.DEFAULT]))
