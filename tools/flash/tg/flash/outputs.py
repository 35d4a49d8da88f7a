"""Output files that never destroy anything: the rules every tg-flash output (dumps, reads, state files,
logs) goes through.

- Only a regular file (or a name that does not exist yet) can be an output. A device node (`/dev/full`,
  `/dev/sda`), a symlink, a folder, a FIFO or a socket is refused: replacing it with a regular file would
  destroy it, and writing through a symlink writes somewhere the user did not name.
- An existing file is kept unless the user passed `--force` (a backup is the one copy of a board's ROM).
- The data goes to a temporary file in the same folder which is renamed over the target only after every
  byte reached the disk, so a full disk or an I/O error leaves the old file exactly as it was.
- A new file gets the mode the umask allows (0666 & ~umask), not mkstemp's 0600; a replaced file keeps
  its own mode.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class OutputError(OSError):
    """An output that tg-flash refuses to write, or could not write; the message says which and why."""


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_output(path: Path, force: bool = False) -> None:
    """Refuse, before any hardware is touched, an output that could not be written without destroying
    something: a device node, a symlink, a folder, an existing file without `force`, or a missing or
    unwritable folder."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None:
        if not stat.S_ISREG(info.st_mode):
            raise OutputError(f"output {path} is {_kind(info.st_mode)}; tg-flash writes only regular files")
        if not force:
            raise OutputError(f"output {path} already exists; pass --force to replace it")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise OutputError(f"output folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"output folder {parent} is not writable")


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_output(path: Path, data: bytes, force: bool = False) -> None:
    """Write `data` to `path` atomically under the rules above (checked again here, just before the rename,
    in case the path changed while the board was being read)."""
    path = Path(path)
    check_output(path, force)
    try:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        existed = True
    except FileNotFoundError:
        mode, existed = _new_file_mode(), False
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.absolute().parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, mode)
        check_output(path, force)
        os.replace(temporary, path)
    except OutputError:
        Path(temporary).unlink(missing_ok=True)
        raise
    except OSError as e:
        Path(temporary).unlink(missing_ok=True)
        kept = f"the existing {path} was left unchanged" if existed else f"no file {path} was created"
        raise OutputError(f"could not write {path} ({e.strerror or e}); {kept}") from e
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def open_log(path: Path):
    """Open a log file for appending, line-buffered. A log may grow an existing regular file, never a device,
    a symlink or a folder."""
    path = Path(path)
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            raise OutputError(f"log {path} is {_kind(info.st_mode)}; tg-flash writes only regular files")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    return os.fdopen(fd, "a", buffering=1)
