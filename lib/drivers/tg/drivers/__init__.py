"""Hardware access for tg: MMIO, PCI, USB, generated bindings and simulated hardware."""
