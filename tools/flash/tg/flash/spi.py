"""The Navi31 SMUIO ROM_SW SPI engine: one SPI transaction of at most 256 data bytes per call.

Before a transaction the driver takes the SPI pins away from GPIO, selects the ROM engine in
PAGE_MIRROR_CNTL and ROM_CNTL and clears the engine; afterwards it puts every one of those registers back,
whatever happened. Opening the engine also sets the SCK prescaler in ROM_CNTL (instead of inheriting a
possibly unusable boot-loader value); closing puts the original ROM_CNTL back.
"""

from __future__ import annotations

from dataclasses import dataclass

from tg.drivers import navi31_regs as regs
from tg.drivers.mmio import MMIOInterface
from tg.flash.errors import FlashError
from tg.flash.interrupts import deferred_interrupt
from tg.flash.poll import wait_until

DEFAULT_PRESCALE = 8


@dataclass(frozen=True)
class SavedPins:
    """Controller registers a transaction changes, as they were before it."""

    gpio_mask: int
    gpio_a: int
    gpio_en: int
    page_mirror: int
    rom_cntl: int


def control_word(command_bytes: int, count: int, receive: bool) -> int:
    """ROM_SW_CNTL: byte count in bits 8:0, command bytes minus one in 17:16, RETURN_DATA_EN in 19."""
    return ((command_bytes - 1) << 16) | (regs.RETURN_DATA_EN if receive else 0) | count


def pack_tx_dwords(data: bytes) -> list[int]:
    """The DATA window takes the byte stream as big-endian dwords, zero-padded to a multiple of 4."""
    padded = data.ljust((len(data) + 3) & ~3, b"\x00")
    return [int.from_bytes(padded[i : i + 4], "big") for i in range(0, len(padded), 4)]


class Navi31SPI:
    def __init__(self, mmio: MMIOInterface, prescale: int = DEFAULT_PRESCALE, timeout: float = 2.0) -> None:
        if not 0 <= prescale <= 15:
            raise ValueError("prescale must be 0..15")
        self.mmio = mmio
        self.prescale = prescale
        self.timeout = timeout
        self._original_rom_cntl: int | None = None

    def open(self) -> Navi31SPI:
        with deferred_interrupt():
            rom_cntl = self.mmio.read32(regs.ROM_CNTL)
            self._original_rom_cntl = rom_cntl
            self.mmio.write32(regs.ROM_CNTL, (rom_cntl & 0xE0FFFFFF) | 1 << 28 | self.prescale << 24 | 1)
        return self

    def close(self) -> None:
        if self._original_rom_cntl is None:
            return
        with deferred_interrupt():
            self.mmio.write32(regs.ROM_CNTL, self._original_rom_cntl)
            self._original_rom_cntl = None

    def __enter__(self) -> Navi31SPI:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transfer(
        self, opcode: int, *, address: int = 0, address_len: int = 0, data_out: bytes = b"", data_in: int = 0
    ) -> bytes:
        """Send opcode, `address_len` address bytes and `data_out`, or receive `data_in` bytes."""
        if data_out and data_in:
            raise ValueError("simultaneous TX and RX is unsupported")
        if not 0 <= address_len <= 3:
            raise ValueError("address_len must be 0..3")
        count = len(data_out) or data_in
        if count > regs.ROM_SW_DATA_SIZE:
            raise ValueError("transfer data must be <= 256 bytes")
        with deferred_interrupt():
            saved = self._take_pins()
            try:
                return self._run(opcode, address, 1 + address_len, data_out, data_in)
            finally:
                self._give_back_pins(saved)

    def _take_pins(self) -> SavedPins:
        mmio = self.mmio
        saved = SavedPins(
            gpio_mask=mmio.read32(regs.GPIO_PAD_MASK),
            gpio_a=mmio.read32(regs.GPIO_PAD_A),
            gpio_en=mmio.read32(regs.GPIO_PAD_EN),
            page_mirror=mmio.read32(regs.PAGE_MIRROR_CNTL),
            rom_cntl=mmio.read32(regs.ROM_CNTL),
        )
        mmio.write32(regs.GPIO_PAD_MASK, saved.gpio_mask & ~regs.SPI_GPIO_BITS)
        mmio.write32(regs.GPIO_PAD_A, saved.gpio_a & ~regs.SPI_GPIO_BITS)
        mmio.write32(regs.GPIO_PAD_EN, saved.gpio_en & ~regs.SPI_GPIO_BITS)
        mmio.write32(regs.PAGE_MIRROR_CNTL, (saved.page_mirror & 0xF1FFFFFF) | 0x06000000)
        mmio.write32(regs.ROM_CNTL, (saved.rom_cntl & ~0xF) | 8)
        return saved

    def _give_back_pins(self, saved: SavedPins) -> None:
        mmio = self.mmio
        mmio.write32(regs.ROM_SW_CNTL, 0)
        mmio.write32(regs.ROM_SW_STATUS, 0)
        mmio.write32(regs.ROM_CNTL, saved.rom_cntl)
        mmio.write32(regs.PAGE_MIRROR_CNTL, saved.page_mirror)
        mmio.write32(regs.GPIO_PAD_A, saved.gpio_a)
        mmio.write32(regs.GPIO_PAD_EN, saved.gpio_en)
        mmio.write32(regs.GPIO_PAD_MASK, saved.gpio_mask)

    def _run(self, opcode: int, address: int, command_bytes: int, data_out: bytes, data_in: int) -> bytes:
        mmio = self.mmio
        mmio.write32(regs.ROM_SW_CNTL, 0)
        mmio.write32(regs.ROM_SW_STATUS, 0)
        status = mmio.read32(regs.ROM_SW_STATUS)
        if status != 0:
            raise FlashError(f"ROM_SW_STATUS did not clear (status=0x{status:08x})")
        # The engine sends the low instruction byte first, then ADDRESS[23:0].
        mmio.write32(regs.ROM_SW_COMMAND, ((address & 0xFFFFFF) << 8) | opcode)
        for i, dword in enumerate(pack_tx_dwords(data_out)):
            mmio.write32(regs.ROM_SW_DATA + 4 * i, dword)
        mmio.write32(regs.ROM_SW_CNTL, control_word(command_bytes, len(data_out) or data_in, bool(data_in)))
        mmio.read32(regs.ROM_SW_CNTL)  # flush the posted write before polling
        # As in the seed, the timeout message is made before polling starts, so it shows the status right
        # after the start; the read is part of the sequence that ran on hardware.
        status = mmio.read32(regs.ROM_SW_STATUS)
        message = f"ROM_SW transaction timeout (status=0x{status:08x}); engine may be gated after SOS boot"
        wait_until(lambda: mmio.read32(regs.ROM_SW_STATUS) & regs.STATUS_DONE, self.timeout, message)
        if not data_in:
            return b""
        # A byte copy, no dword swap: the window holds the received stream in wire order.
        return mmio.read(regs.ROM_SW_DATA, (data_in + 3) & ~3)[:data_in]
