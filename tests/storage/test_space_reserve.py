import errno
import os

import pytest

from storage import space_reserve


def _full_once():
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return "written"
    return fn, calls


def test_a_full_disk_write_frees_the_reserve_and_retries_once(tmp_path):
    assert space_reserve.ensure(str(tmp_path), 64 * 1024)
    path = tmp_path / space_reserve.RESERVE_FILE
    assert path.stat().st_blocks * 512 >= 64 * 1024        # real blocks, not a hole
    fn, calls = _full_once()
    assert space_reserve.write(str(tmp_path), fn) == "written" and len(calls) == 2
    assert path.exists()                    # put back: there is room here


def test_without_a_reserve_or_for_other_errors_the_error_stands(tmp_path):
    fn, calls = _full_once()
    with pytest.raises(OSError) as ei:
        space_reserve.write(str(tmp_path), fn)
    assert ei.value.errno == errno.ENOSPC and len(calls) == 1
    space_reserve.ensure(str(tmp_path), 4096)

    def eio():
        raise OSError(errno.EIO, "I/O error")
    with pytest.raises(OSError):
        space_reserve.write(str(tmp_path), eio)
    assert (tmp_path / space_reserve.RESERVE_FILE).exists()


def test_no_half_reserve_when_there_is_no_room(tmp_path, monkeypatch):
    def no_room(fd, off, n):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", no_room)
    assert not space_reserve.ensure(str(tmp_path))
    assert not (tmp_path / space_reserve.RESERVE_FILE).exists()


def test_the_freed_reserve_is_not_taken_back_while_space_is_short(tmp_path, monkeypatch):
    """Right after a release on a full disk the freed space is for the metadata writes:
    the reserve comes back only when there is room for it twice over."""
    assert space_reserve.ensure(str(tmp_path), 64 * 1024)
    real = os.statvfs

    class Short:
        f_bavail, f_frsize = 100, 1024          # 100 KiB free: less than 2 x 64 KiB

    monkeypatch.setattr(os, "statvfs", lambda p: Short)
    fn, calls = _full_once()
    space_reserve.write(str(tmp_path), fn)
    assert not (tmp_path / space_reserve.RESERVE_FILE).exists()
    monkeypatch.setattr(os, "statvfs", real)
    assert space_reserve.ensure(str(tmp_path), 64 * 1024)
