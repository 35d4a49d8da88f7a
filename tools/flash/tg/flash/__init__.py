"""tg-flash: read, verify and program the SPI flash of AMD Navi31 boards."""
