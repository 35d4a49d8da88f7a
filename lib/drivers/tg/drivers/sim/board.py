"""A simulated Navi31 BAR5: registers with side effects, behind the same MMIOInterface a real BAR has.

It wires the ROM_SW engine, the GD25LQ16E chip, the ROM_INDEX/ROM_DATA aperture and the PSP mailbox to
their registers, records every access (`trace`) and remembers the controller registers as they were
when the session began, so that a driver which forgets to restore one is caught.
"""

from __future__ import annotations

from tg.drivers import navi31_regs as r
from tg.drivers.mmio import MMIOInterface
from tg.drivers.sim.faults import Faults
from tg.drivers.sim.gd25 import FLASH_SIZE, GD25Chip
from tg.drivers.sim.psp import PSPMailboxSim, PSPScript
from tg.drivers.sim.registers import POWER_ON_REGISTERS, REGISTER_NAMES, RESTORED_REGISTERS
from tg.drivers.sim.romsw import RomSwEngine, SimProtocolError

WINDOW_START = r.ROM_SW_DATA
WINDOW_END = r.ROM_SW_DATA + r.ROM_SW_DATA_SIZE


class SimNavi31Board(MMIOInterface):
    def __init__(
        self,
        chip: GD25Chip,
        faults: Faults | None = None,
        registers: dict[int, int] | None = None,
        psp_script: PSPScript | None = None,
        ifwi: bytes = b"",
    ) -> None:
        self.size = r.BAR5_SIZE
        self.chip = chip
        self.faults = faults or chip.faults
        self.regs = dict(POWER_ON_REGISTERS)
        self.regs.update(registers or {})
        self.engine = RomSwEngine(self.regs, chip, self.faults)
        self.psp = PSPMailboxSim(psp_script or PSPScript(), ifwi, self.faults)
        self.trace: list[tuple[str, int, int | bytes]] = []
        self.baseline = self.controller_registers()
        self._aperture_address = 0
        self.aperture_used = False

    # -- MMIOInterface ---------------------------------------------------------------------------------------

    def read32(self, offset: int) -> int:
        if WINDOW_START <= offset < WINDOW_END:
            value = int.from_bytes(self.engine.window[offset - WINDOW_START : offset - WINDOW_START + 4], "little")
        else:
            value = self._read_register(offset)
        self.trace.append(("R32", offset, value))
        return value

    def write32(self, offset: int, value: int) -> None:
        value &= 0xFFFFFFFF
        self.trace.append(("W32", offset, value))
        if WINDOW_START <= offset < WINDOW_END:
            start = offset - WINDOW_START
            self.engine.window[start : start + 4] = value.to_bytes(4, "little")
        else:
            self._write_register(offset, value)

    def read(self, offset: int, size: int) -> bytes:
        if WINDOW_START <= offset and offset + size <= WINDOW_END:
            data = bytes(self.engine.window[offset - WINDOW_START : offset - WINDOW_START + size])
            self.trace.append(("RB", offset, data))
            return data
        self._require_aligned(offset, size)
        return b"".join(self.read32(offset + i).to_bytes(4, "little") for i in range(0, size, 4))

    def write(self, offset: int, data: bytes) -> None:
        self._require_aligned(offset, len(data))
        for i in range(0, len(data), 4):
            self.write32(offset + i, int.from_bytes(data[i : i + 4], "little"))

    # -- registers with side effects ---------------------------------------------------------------------------

    def _read_register(self, offset: int) -> int:
        self._require_aligned(offset, 4)
        if offset == r.ROM_CNTL and self.faults.aperture == "unavailable":
            return 0xFFFFFFFF
        if offset == r.ROM_SW_STATUS:
            return self.engine.read_status()
        if offset == r.ROM_DATA:
            return self._read_aperture()
        if offset == r.PSP_COMMAND:
            return self.psp.read_command()
        if offset == r.PSP_COMMAND_DATA:
            return self.psp.data
        return self.regs.get(offset, 0)

    def _write_register(self, offset: int, value: int) -> None:
        self._require_aligned(offset, 4)
        if offset == r.ROM_SW_CNTL:
            self.engine.write_control(value)
        elif offset == r.ROM_SW_STATUS:
            self.engine.write_status(value)
        elif offset == r.ROM_SW_COMMAND:
            self.engine.write_command(value)
        elif offset == r.ROM_INDEX:
            self.regs[offset] = value
            # The index register takes the 64 KiB page number shifted right by 8, byte-swapped.
            self._aperture_address = int.from_bytes(value.to_bytes(4, "little"), "big") << 8
        elif offset == r.PSP_COMMAND:
            self.psp.write_command(value)
        elif offset == r.PSP_COMMAND_DATA:
            self.psp.data = value
        elif offset == r.PSP_DOORBELL:
            self.psp.doorbell(value)
        else:
            self.regs[offset] = value

    def _read_aperture(self) -> int:
        # The seed's fw dump (validated on hardware) writes ROM_CNTL byte-swapped, as it does ROM_INDEX; the
        # aperture decodes both that way.
        if not _bswap32(self.regs[r.ROM_CNTL]) & r.ROM_APERTURE_ENABLE:
            raise SimProtocolError("ROM_DATA read while the aperture enable (bswapped ROM_CNTL bit 29) is clear")
        self.aperture_used = True
        address = self._aperture_address
        if self.faults.aperture == "mirrored":
            address %= FLASH_SIZE // 2
        address %= FLASH_SIZE
        self._aperture_address += 4
        return int.from_bytes(self.chip.data[address : address + 4], "little")

    @staticmethod
    def _require_aligned(offset: int, size: int) -> None:
        if offset % 4 or size % 4:
            raise SimProtocolError(f"unaligned register access at 0x{offset:x} (+{size}); registers are 32-bit")

    # -- checks for tests and session close --------------------------------------------------------------------

    def controller_registers(self) -> dict[str, int]:
        return {name: self.regs[offset] for name, offset in RESTORED_REGISTERS.items()}

    def unrestored_registers(self) -> dict[str, tuple[int, int]]:
        """Registers whose value differs from the session start: name -> (expected, found)."""
        now = self.controller_registers()
        return {name: (self.baseline[name], now[name]) for name in now if not self._restored(name, now[name])}

    def _restored(self, name: str, value: int) -> bool:
        """The seed restores ROM_CNTL and ROM_INDEX after an aperture dump with bswap32 of what it read, and that
        ran on hardware, so after a dump the swapped value counts as restored (tools.md A.8.4)."""
        if value == self.baseline[name]:
            return True
        return self.aperture_used and name in ("ROM_CNTL", "ROM_INDEX") and value == _bswap32(self.baseline[name])


def format_trace(trace: list[tuple[str, int, int | bytes]]) -> str:
    """One access per line: `W32 05a3a0 00000000`, `R32 ...`, or `RB 05a3b0 <hex bytes>`."""
    lines = []
    for op, offset, value in trace:
        shown = value.hex() if isinstance(value, bytes) else f"{value:08x}"
        label = REGISTER_NAMES.get(offset) or _window_label(offset)
        lines.append(f"{op:<3} {offset:06x} {shown}  {label}".rstrip())
    return "\n".join(lines) + ("\n" if lines else "")


def _window_label(offset: int) -> str:
    if WINDOW_START <= offset < WINDOW_END:
        return f"ROM_SW_DATA+0x{offset - WINDOW_START:02x}"
    return ""


def _bswap32(value: int) -> int:
    return int.from_bytes(value.to_bytes(4, "little"), "big")
