"""Navi31 hardware facts that the flash driver and the simulator must agree on, stated once here.

PCI identity, BAR5 register offsets and bits (SMUIO ROM controller, ROM_SW SPI engine, the GPIO pads the
SPI pins share, the PSP mailbox) and the geometry of the board's GD25LQ16E SPI flash. What only the
simulator needs (power-on values, trace names) lives in `tg.drivers.sim.registers`.
"""

VENDOR_AMD = 0x1002
NAVI31_DEVICE_IDS = (0x744C,)
BAR = 5
BAR5_SIZE = 0x100000

# The SPI flash on the board (GigaDevice GD25LQ16E): 2 MiB, 4 KiB sectors, 256-byte program pages.
FLASH_SIZE = 0x200000
SECTOR_SIZE = 0x1000
PAGE_SIZE = 0x100
SECTOR_COUNT = FLASH_SIZE // SECTOR_SIZE
INDEX_PAGE = 0x10000  # ROM aperture page

# SMUIO ROM controller and the ROM_SW SPI engine
ROM_CNTL = 0x5A380
PAGE_MIRROR_CNTL = 0x5A384
ROM_INDEX = 0x5A390
ROM_DATA = 0x5A394
ROM_SW_CNTL = 0x5A3A0
ROM_SW_STATUS = 0x5A3A4
ROM_SW_COMMAND = 0x5A3A8
ROM_SW_DATA = 0x5A3B0
ROM_SW_DATA_SIZE = 0x100  # bytes per ROM_SW transaction: the size of the DATA window

RETURN_DATA_EN = 1 << 19
STATUS_DONE = 1
ROM_APERTURE_ENABLE = 1 << 29

# The SPI pins double as GPIOs; bits 7-10 hand them to the ROM engine while they are clear.
GPIO_PAD_MASK = 0x5A504
GPIO_PAD_A = 0x5A508
GPIO_PAD_EN = 0x5A510
SPI_GPIO_BITS = 0x780

# PSP C2PMSG mailbox
PSP_COMMAND = 0x582CC
PSP_COMMAND_DATA = 0x582D0
PSP_DOORBELL = 0x58224
