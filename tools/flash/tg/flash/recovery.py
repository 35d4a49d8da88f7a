"""What a user needs after a flash stops half way: the last sector that was written and verified, the exact
command that resumes from the next one, and a log file that keeps every per-sector line (a progress bar on a
terminal does not)."""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tg.drivers import navi31_regs as regs
from tg.drivers.transport import Transport
from tg.flash.board import BoardOptions
from tg.flash.outputs import open_log


def default_log_path() -> Path:
    """`$TG_CACHE_DIR/flash/flash-<UTC time>.log` (the cache directory defaults to ~/.cache/tg)."""
    cache = Path(os.environ.get("TG_CACHE_DIR") or Path.home() / ".cache" / "tg")
    return cache / "flash" / time.strftime("flash-%Y%m%d-%H%M%S.log", time.gmtime())


def global_arguments(options: BoardOptions) -> list[str]:
    """The global options that reach the same board again."""
    args = []
    if options.transport is not Transport.AUTO:
        args += ["--transport", options.transport.value]
    if options.sim_state is not None:
        args += ["--sim-state", str(options.sim_state)]
    if options.remote is not None:
        args += ["--remote", options.remote]
    if options.device:
        args += ["--device", str(options.device)]
    if options.prescale != 8:
        args += ["--prescale", str(options.prescale)]
    return args


@dataclass
class FlashProgress:
    """Sectors of one `flash` run, for the resume hint."""

    options: BoardOptions
    image: Path
    start: int
    count: int
    clear_cmp: bool
    last_good: int | None = None

    def sector_done(self, sector: int) -> None:
        self.last_good = sector

    def resume_lines(self) -> list[str]:
        next_sector = self.start if self.last_good is None else self.last_good + 1
        end = self.start + self.count
        if next_sector >= end:
            return ["every requested sector was written and verified"]
        if self.last_good is None:
            good = "last good sector: none (no sector of this run was completed)"
        else:
            good = f"last good sector: {self.last_good:03d} @0x{self.last_good * regs.SECTOR_SIZE:05x}"
        command = ["tg-flash", *global_arguments(self.options), "flash", str(self.image)]
        command += ["--start-sector", str(next_sector), "--sector-count", str(end - next_sector)]
        command += ["--clear-cmp"] if self.clear_cmp else []
        command += ["--yes"]
        return [good, f"resume with: {shlex.join(command)}"]


class FlashLog:
    """Appends lines to the log file, each flushed at once, so the file survives a crash or a Ctrl-C."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = open_log(self.path)

    def line(self, text: str) -> None:
        try:
            self._file.write(f"{time.strftime('%H:%M:%S', time.gmtime())} {text}\n")
            self._file.flush()
        except OSError as e:
            raise OSError(e.errno, f"log {self.path}: {e.strerror or e}") from None

    def try_lines(self, lines: list[str]) -> None:
        """Log what a stopped run leaves behind, if the log can still take it (the disk may be full)."""
        try:
            for text in lines:
                self.line(text)
        except OSError as e:  # line() names the log in strerror
            print(f"warning: {e.strerror or e}; the lines above are not in the log", file=sys.stderr)

    def close(self) -> None:
        """Close the log; a flush that fails (a full disk) is reported, never raised over the run's outcome."""
        try:
            self._file.close()
        except OSError as e:
            print(f"warning: log {self.path} could not be completed ({e.strerror or e})", file=sys.stderr)
