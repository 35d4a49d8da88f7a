"""AMD GPUs: the code-object loader, the RDNA3 instruction emulator, the simulated Navi31 and the interfaces
(real KFD, simulator) that tg.hcq's AMD device drives. See iface.py for how the pieces meet."""
