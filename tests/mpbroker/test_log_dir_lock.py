"""The log dir lock: exclusive, names its holder, survives a child closing its copy,
released when the last holder exits; unusable dirs are refused with one line."""
from __future__ import annotations

import os
import subprocess

import pytest

from mpbroker.log_dir_lock import LOCK_FILE, LogDirError, check_usable, claim_log_dirs, lock_dir


def test_second_claim_is_refused_with_the_holders_pid(tmp_path):
    locks = claim_log_dirs([str(tmp_path / "a"), str(tmp_path / "b")])
    try:
        assert (tmp_path / "a" / LOCK_FILE).read_text().strip() == str(os.getpid())
        with pytest.raises(LogDirError, match=rf"^log dir {tmp_path / 'b'} is locked by another "
                                              rf"mpbroker process \(pid {os.getpid()}\)$"):
            lock_dir(str(tmp_path / "b"))
    finally:
        locks.release()
    claim_log_dirs([str(tmp_path / "a"), str(tmp_path / "b")]).release()


def test_a_failed_claim_releases_the_dirs_it_took(tmp_path):
    (tmp_path / "held").mkdir()
    held = lock_dir(str(tmp_path / "held"))
    with pytest.raises(LogDirError):
        claim_log_dirs([str(tmp_path / "ok"), str(tmp_path / "held")])
    os.close(held)
    os.close(lock_dir(str(tmp_path / "ok")))


def test_a_forked_child_closing_its_copy_keeps_the_lock(tmp_path):
    fd = lock_dir(str(tmp_path))
    pid = os.fork()
    if pid == 0:
        os.close(fd)
        os._exit(0)
    os.waitpid(pid, 0)
    with pytest.raises(LogDirError, match="is locked"):
        lock_dir(str(tmp_path))
    os.close(fd)
    os.close(lock_dir(str(tmp_path)))


def test_lock_is_released_when_the_holder_dies(tmp_path):
    code = ("import sys, time; from mpbroker.log_dir_lock import lock_dir; lock_dir(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(60)")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    p = subprocess.Popen([os.sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, env=env)
    try:
        assert p.stdout.readline().strip() == b"locked"
        with pytest.raises(LogDirError, match=rf"\(pid {p.pid}\)"):
            lock_dir(str(tmp_path))
    finally:
        p.kill()
        p.wait()
    os.close(lock_dir(str(tmp_path)))


def test_unusable_dirs(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(LogDirError, match=r"^log dir .*/file is not a directory$"):
        check_usable(str(tmp_path / "file"))
    with pytest.raises(LogDirError, match=r"^log dir .*/file/sub cannot be created: Not a directory$"):
        check_usable(str(tmp_path / "file" / "sub"))
    check_usable(str(tmp_path / "new" / "deeper"))
    assert (tmp_path / "new" / "deeper").is_dir()


def test_with_several_dirs_an_unusable_one_is_left_out(tmp_path):
    """Kafka's LogManager puts a log dir that fails its checks offline and starts on the
    others (the disk fault test restarts with one dir failed); a dir held by another
    broker, or no usable dir at all, still stops the start."""
    (tmp_path / "afile").write_text("x")
    left_out = []
    locks = claim_log_dirs([str(tmp_path / "afile"), str(tmp_path / "ok")],
                           on_offline=left_out.append)
    try:
        assert [str(e) for e in left_out] == [f"log dir {tmp_path / 'afile'} is not a directory"]
        assert len(locks.fds) == 1 and (tmp_path / "ok" / LOCK_FILE).exists()
    finally:
        locks.release()
    with pytest.raises(LogDirError, match="afile is not a directory"):
        claim_log_dirs([str(tmp_path / "afile"), str(tmp_path / "afile" / "sub")])
    held = lock_dir(str(tmp_path / "ok"))
    try:
        with pytest.raises(LogDirError, match="is locked by another"):
            claim_log_dirs([str(tmp_path / "other"), str(tmp_path / "ok")])
    finally:
        os.close(held)
    os.close(lock_dir(str(tmp_path / "other")))       # released by the failed claim
