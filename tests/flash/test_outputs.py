"""Outputs never destroy a file (issue 20 item 4): device nodes, symlinks and folders are refused, an
existing file needs --force, the umask decides the mode, and a failed write leaves the old file intact."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tg.flash import outputs
from tg.flash.outputs import OutputError, check_output, write_output


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_dump_to_dev_full_is_refused_and_the_device_node_survives(make_board) -> None:
    board = make_board()
    before = os.lstat("/dev/full")
    result = board.run("dump", "/dev/full", "--force")
    assert result.exit_code == 1
    assert "error: output /dev/full is a device node" in result.stderr
    after = os.lstat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert board.state().sessions == 0, "the board must not be touched"


def test_a_symlink_output_is_refused_and_its_target_kept(make_board, tmp_path: Path) -> None:
    board = make_board()
    target = tmp_path / "precious.bin"
    target.write_bytes(b"keep me")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    result = board.run("read", "0", "16", "-o", str(link), "--force")
    assert result.exit_code == 1 and "is a symlink" in result.stderr
    assert link.is_symlink() and target.read_bytes() == b"keep me"


def test_a_folder_output_is_refused(make_board, tmp_path: Path) -> None:
    result = make_board().run("fw", "dump", str(tmp_path))
    assert result.exit_code == 1 and "is a folder" in result.stderr


def test_an_existing_file_needs_force_and_a_read_only_backup_survives(make_board, tmp_path: Path) -> None:
    board = make_board()
    backup = tmp_path / "backup.bin"
    backup.write_bytes(b"old backup")
    backup.chmod(0o444)
    result = board.run("dump", str(backup))
    assert result.exit_code == 1 and "already exists; pass --force" in result.stderr
    assert backup.read_bytes() == b"old backup"
    assert board.run("dump", str(backup), "--force").exit_code == 0
    assert backup.read_bytes() == board.flash()
    assert stat.S_IMODE(backup.stat().st_mode) == 0o444, "a replaced file keeps its own mode"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_new_output_gets_the_mode_the_umask_allows(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        write_output(tmp_path / "out.bin", b"data")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == 0o666 & ~umask


def test_a_full_disk_leaves_the_old_file_intact_and_says_so(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "dump.bin"
    target.write_bytes(b"the old dump")

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outputs.os, "fsync", no_space)
    with pytest.raises(OutputError, match=r"No space left on device.*existing .*dump.bin was left unchanged"):
        write_output(target, b"x" * 100, force=True)
    assert target.read_bytes() == b"the old dump"
    assert [p.name for p in tmp_path.iterdir()] == ["dump.bin"], "the temporary file is removed"


def test_a_write_error_for_a_new_file_creates_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(outputs.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(OutputError, match="no file .* was created"):
        write_output(tmp_path / "new.bin", b"data")
    assert list(tmp_path.iterdir()) == []


def test_check_output_names_fifos_and_missing_folders(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="is a FIFO"):
        check_output(fifo, force=True)
    with pytest.raises(OutputError, match="does not exist"):
        check_output(tmp_path / "missing" / "x.bin")


def test_sim_init_does_not_replace_an_existing_state_without_force(cli, tmp_path: Path) -> None:
    state = tmp_path / "board.sim"
    assert cli("sim", "init", str(state)).exit_code == 0
    before = state.read_bytes()
    result = cli("sim", "init", str(state), "--cmp")
    assert result.exit_code == 1 and "already exists" in result.stderr
    assert state.read_bytes() == before
    assert cli("sim", "init", str(state), "--cmp", "--force").exit_code == 0
