"""Fault injection switches for the simulated board; every field defaults to a healthy board."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Faults:
    gated: bool = False  # ROM_SW engine gated after SOS boot: STATUS shows 0x04000800 and never completes
    status_stuck: bool = False  # ROM_SW_STATUS ignores writes of 0
    wel_never_sets: bool = False  # WREN is ignored by the chip
    busy_forever: bool = False  # the chip never leaves BUSY after a program, erase or status write
    stuck_bits: dict[int, int] = field(default_factory=dict)  # flash address -> bits stuck at 1
    psp_errors: dict[int, int] = field(default_factory=dict)  # PSP command -> error code it returns
    psp_gated: bool = False  # a fully booted SOS: GET_TRANSFER_TYPE answers error 0x0A
    psp_not_ready: bool = False  # the PSP never hands the mailbox back: COMMAND bit 31 stays clear
    aperture: str = "raw"  # ROM aperture: raw | unavailable | mirrored
    usb_link_down: bool = False  # the simulated ASM24's PCIe link never reaches L0
    usb_stall_at: list[int] = field(default_factory=list)  # control transfers (from 1) answered with a STALL
    usb_tlp_timeout_at: list[int] = field(default_factory=list)  # non-posted TLPs (from 1) whose completion times out

    def to_json(self) -> dict:
        data = asdict(self)
        data["stuck_bits"] = {str(k): v for k, v in self.stuck_bits.items()}
        data["psp_errors"] = {str(k): v for k, v in self.psp_errors.items()}
        return data

    @classmethod
    def from_json(cls, data: dict) -> Faults:
        data = dict(data)
        data["stuck_bits"] = {int(k): v for k, v in data.get("stuck_bits", {}).items()}
        data["psp_errors"] = {int(k): v for k, v in data.get("psp_errors", {}).items()}
        data.pop("usb_corrupt_cbw_at", None)  # a mass-storage fault of the bridge path before issue 36
        return cls(**data)
