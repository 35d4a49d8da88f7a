"""Members of tar and zip archives as uint8 tensors (tinygrad's `tar_extract` and `zip_extract`).

An archive given as a path (or as a Tensor on a DISK device, such as `Tensor(pathlib.Path(...))`) is mapped: each
stored member is a lazy view of its bytes in the file. Compressed members, and archives in memory, are read.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path
from typing import IO

from tg.codegen import dtypes
from tg.tensor.state.disk import FileView
from tg.tensor.state.errors import StateFileError
from tg.tensor.state.torch_zip import member_data_offset
from tg.tensor.tensor import Tensor


def _source(archive: str | Path | Tensor) -> tuple[FileView | None, IO[bytes] | str]:
    """The mapped file (None for an archive that is only in memory) and what tarfile/zipfile should open."""
    if isinstance(archive, Tensor):
        if archive.device.startswith("DISK:"):
            path = archive.device[len("DISK:") :]
            return FileView(path), path
        return None, io.BytesIO(bytes(archive.data()))
    return FileView(archive), str(archive)


def _read_members(tar: tarfile.TarFile) -> dict[str, Tensor]:
    members = {}
    for member in tar.getmembers():
        data = tar.extractfile(member) if member.isfile() else None
        if data is not None:
            members[member.name] = Tensor(data.read(), dtype=dtypes.uint8)
    return members


def tar_extract(archive: str | Path | Tensor) -> dict[str, Tensor]:
    """{member name: uint8 Tensor} for every regular file in a tar archive (mapped when uncompressed)."""
    view, opened = _source(archive)
    try:
        if view is not None:
            try:
                with tarfile.open(view.path, mode="r:") as tar:  # uncompressed: each member is a range of the file
                    files = [member for member in tar.getmembers() if member.isfile()]
                    return {m.name: view.tensor(m.offset_data, (m.size,), dtypes.uint8) for m in files}
            except tarfile.ReadError:
                pass  # compressed: read the members through tarfile below
        with tarfile.open(opened) if isinstance(opened, str) else tarfile.open(fileobj=opened) as tar:
            return _read_members(tar)
    except tarfile.TarError as error:
        raise StateFileError(view.path if view else "<tensor>", f"not a readable tar archive ({error})") from None


def zip_extract(archive: str | Path | Tensor) -> dict[str, Tensor]:
    """{member name: uint8 Tensor} for every file in a zip archive (stored members mapped, deflated ones read)."""
    view, opened = _source(archive)
    try:
        with zipfile.ZipFile(opened) as zipped:
            members = {}
            for info in zipped.infolist():
                if info.is_dir():
                    continue
                if view is not None and info.compress_type == zipfile.ZIP_STORED:
                    start = member_data_offset(view, info)
                    members[info.filename] = view.tensor(start, (info.file_size,), dtypes.uint8)
                else:
                    members[info.filename] = Tensor(zipped.read(info), dtype=dtypes.uint8)
            return members
    except zipfile.BadZipFile as error:
        raise StateFileError(view.path if view else "<tensor>", f"not a readable zip archive ({error})") from None
