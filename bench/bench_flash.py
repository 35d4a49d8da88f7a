"""Time tg-flash on the simulated Navi31 board over each path: the simulated ASM24 USB bridge (usb-sim), the
direct simulated BAR (pci-sim), and remote PCI over loopback to a server holding a pci-sim board (remote).

    uv run python bench/bench_flash.py [--repeats 3] [--paths usb-sim,pci-sim,remote] [--sectors 512]

Per path: a full flash where every sector changes, a verify, and an unchanged re-flash (all skipped).
Prints the median of the repeats (the machine is shared, so single runs are noisy). No software peer
programs this chip, so the reference is the hardware lower bound from the GD25 datasheet typicals
(512 sector erases x 50 ms + 8192 page programs x 0.7 ms = 31.3 s): a path's overhead should stay well
below what the real part needs. The simulated chip's busy times are scaled to 1/100 of the datasheet.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from tg.drivers import navi31_regs as regs
from tg.drivers.remote import RemoteServer, ServedDevice
from tg.drivers.sim.state import load_state, new_state, save_state
from tg.drivers.transport import Transport, open_board
from tg.flash.board import BoardOptions, open_flash
from tg.flash.program import SectorRange, program_image

HARDWARE_LOWER_BOUND_S = 512 * 0.050 + 8192 * 0.0007
PATHS = ("usb-sim", "pci-sim", "remote")


@contextmanager
def board_options(path: str, state_path: Path):
    """BoardOptions reaching the simulated board at `state_path` over `path`."""
    if path != "remote":
        yield BoardOptions(transport=Transport.SIM, sim_state=state_path)
        return
    connection = open_board(BoardOptions(transport=Transport.SIM, sim_state=state_path).request())
    device = ServedDevice("sim", regs.VENDOR_AMD, regs.NAVI31_DEVICE_IDS[0], {regs.BAR: connection.mmio})
    server = RemoteServer([device], "127.0.0.1", 0, token="bench", quiet=True)
    server.serve_in_thread()
    try:
        yield BoardOptions(transport=Transport.REMOTE, remote=f"127.0.0.1:{server.port}", token="bench")
    finally:
        server.shutdown()
        server.server_close()
        connection.close()


def timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of `fn`: the simulator runs in this process, so CPU time is the host-side cost of
    the whole path (driver, protocol, simulated bridge and chip), wall time adds the scaled chip busy times."""
    started, cpu_started = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - started, time.process_time() - cpu_started


def one_round(folder: Path, path: str, seed: int, sectors: int) -> dict[str, tuple[float, float]]:
    rng = random.Random(seed)
    state_path = folder / f"{path}-{seed}.sim"
    state = new_state(rng.randbytes(0x200000))
    state.via = "usb" if path == "usb-sim" else "pci"
    save_state(state, state_path)
    image = rng.randbytes(0x200000)
    span = SectorRange(0, sectors)
    times = {}
    with board_options(path, state_path) as options:

        def flash() -> None:
            with open_flash(options) as chip:
                program_image(chip, image, span, clear_cmp=False)

        def verify() -> None:
            with open_flash(options) as chip:
                for sector in span.sectors():
                    address = sector * regs.SECTOR_SIZE
                    assert chip.read(address, regs.SECTOR_SIZE) == image[address : address + regs.SECTOR_SIZE]

        times["flash (all sectors change)"] = timed(flash)
        times["verify"] = timed(verify)
        times["flash again (all skipped)"] = timed(flash)
    written = bytes(load_state(state_path).flash)
    assert written[: sectors * regs.SECTOR_SIZE] == image[: sectors * regs.SECTOR_SIZE]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--sectors", type=int, default=512, help="sectors to flash (512: the whole chip)")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        parser.error(f"unknown paths {sorted(unknown)}; choose from {', '.join(PATHS)}")
    bound = HARDWARE_LOWER_BOUND_S * args.sectors / 512
    print(f"tg-flash on the simulator, {args.sectors} sectors, median of {args.repeats} (shared machine: noisy)")
    print(f"hardware lower bound for {args.sectors} sectors (datasheet typicals, not measured): {bound:.1f} s")
    with tempfile.TemporaryDirectory() as folder:
        for path in paths:
            rounds = [one_round(Path(folder), path, seed, args.sectors) for seed in range(args.repeats)]
            for name in rounds[0]:
                seconds = statistics.median(r[name][0] for r in rounds)
                cpu = statistics.median(r[name][1] for r in rounds)
                print(
                    f"  {path:<8} {name:<28} {seconds:7.2f} s wall {cpu:7.2f} s CPU   "
                    f"{seconds / bound:5.2f}x of the hardware bound"
                )


if __name__ == "__main__":
    main()
