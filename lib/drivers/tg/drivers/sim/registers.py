"""What only the simulated Navi31 BAR5 needs: power-on values, the registers a session must restore, and
the names shown in access traces. The register offsets themselves are hardware facts, in `tg.drivers.navi31_regs`.
"""

from tg.drivers.navi31_regs import (
    GPIO_PAD_A,
    GPIO_PAD_EN,
    GPIO_PAD_MASK,
    PAGE_MIRROR_CNTL,
    PSP_COMMAND,
    PSP_COMMAND_DATA,
    PSP_DOORBELL,
    ROM_CNTL,
    ROM_DATA,
    ROM_INDEX,
    ROM_SW_CNTL,
    ROM_SW_COMMAND,
    ROM_SW_STATUS,
)

# The ROM_SW_STATUS value the simulated engine shows while the `gated` fault holds it.
GATED_STATUS = 0x04000800

# Registers a transfer or dump may change and must put back; checked when a simulated session closes.
RESTORED_REGISTERS = {
    "ROM_CNTL": ROM_CNTL,
    "PAGE_MIRROR_CNTL": PAGE_MIRROR_CNTL,
    "ROM_INDEX": ROM_INDEX,
    "ROM_SW_CNTL": ROM_SW_CNTL,
    "GPIO_PAD_MASK": GPIO_PAD_MASK,
    "GPIO_PAD_A": GPIO_PAD_A,
    "GPIO_PAD_EN": GPIO_PAD_EN,
}

# Power-on values: the SPI pins are muxed to GPIO (bits 7-10 set) so a driver that forgets to hand them
# to the ROM engine is caught.
POWER_ON_REGISTERS = {
    ROM_CNTL: 0x08000003,
    PAGE_MIRROR_CNTL: 0x00000100,
    ROM_INDEX: 0x00000000,
    ROM_SW_CNTL: 0x00000000,
    ROM_SW_STATUS: 0x00000000,
    ROM_SW_COMMAND: 0x00000000,
    GPIO_PAD_MASK: 0x00000F80,
    GPIO_PAD_A: 0x00000780,
    GPIO_PAD_EN: 0x00001780,
}

# Names shown in access traces.
REGISTER_NAMES = {
    ROM_CNTL: "ROM_CNTL",
    PAGE_MIRROR_CNTL: "PAGE_MIRROR_CNTL",
    ROM_INDEX: "ROM_INDEX",
    ROM_DATA: "ROM_DATA",
    ROM_SW_CNTL: "ROM_SW_CNTL",
    ROM_SW_STATUS: "ROM_SW_STATUS",
    ROM_SW_COMMAND: "ROM_SW_COMMAND",
    GPIO_PAD_MASK: "GPIO_PAD_MASK",
    GPIO_PAD_A: "GPIO_PAD_A",
    GPIO_PAD_EN: "GPIO_PAD_EN",
    PSP_COMMAND: "PSP_COMMAND",
    PSP_COMMAND_DATA: "PSP_COMMAND_DATA",
    PSP_DOORBELL: "PSP_DOORBELL",
}
