"""Time tg-flash on the simulated Navi31 board: full 2 MiB flash, verify, dump and an unchanged re-flash.

    uv run python bench/bench_flash.py [--repeats 3]

Prints the median of several repeats (the machine is shared, so single runs are noisy). No software
peer programs this chip, so the reference is the hardware lower bound from the GD25 datasheet typicals
(512 sector erases x 50 ms + 8192 page programs x 0.7 ms = 31.3 s): the simulator's own overhead should
stay well below what the real part needs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from tg.drivers.sim.state import load_state, new_state, save_state
from tg.drivers.transport import Transport
from tg.flash.board import BoardOptions, open_flash
from tg.flash.program import SectorRange, program_image, verify_against

HARDWARE_LOWER_BOUND_S = 512 * 0.050 + 8192 * 0.0007


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def one_round(folder: Path, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    state_path = folder / f"board{seed}.sim"
    save_state(new_state(rng.randbytes(0x200000)), state_path)
    image = rng.randbytes(0x200000)
    options = BoardOptions(transport=Transport.SIM, sim_state=state_path)
    times = {}

    def flash() -> None:
        with open_flash(options) as chip:
            program_image(chip, image, SectorRange(0, 512), clear_cmp=False)

    def verify() -> None:
        with open_flash(options) as chip:
            assert verify_against(chip, image) is None

    def dump() -> None:
        with open_flash(options) as chip:
            assert chip.read(0, 0x200000) == image

    times["flash (all sectors change)"] = timed(flash)
    times["verify"] = timed(verify)
    times["dump"] = timed(dump)
    times["flash again (all skipped)"] = timed(flash)
    assert bytes(load_state(state_path).flash) == image
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rounds = [one_round(Path(folder), seed) for seed in range(args.repeats)]
    print(f"tg-flash on the simulator, median of {args.repeats} repeats (shared machine: expect noise)")
    medians = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    for name, seconds in medians.items():
        print(f"  {name:<28} {seconds:7.2f} s   {seconds / HARDWARE_LOWER_BOUND_S:5.2f}x of the hardware bound")
    total = medians["flash (all sectors change)"] + medians["verify"]
    print(f"  full flash + verify          {total:7.2f} s   (requirement: < 60 s)")
    print(f"  hardware lower bound (datasheet typicals, not measured): {HARDWARE_LOWER_BOUND_S:.1f} s")


if __name__ == "__main__":
    main()
