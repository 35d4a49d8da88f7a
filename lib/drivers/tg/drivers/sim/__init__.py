"""Simulated hardware for tests: a Navi31 board's SPI flash path (ROM_SW engine, GD25LQ16E chip, ROM
aperture) and its PSP early-firmware mailbox. Selected only explicitly (`--transport sim`)."""
