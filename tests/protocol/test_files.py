"""atomic_write: the whole new content or the old one, never a torn file or a temp file left behind."""
from __future__ import annotations

import os

import pytest

from protocol.files import WriteFailed, atomic_write, atomic_write_with
from tests.fs_faults import full_disk, read_only


def test_writes_and_replaces_whole_files(tmp_path):
    target = tmp_path / "endpoints.json"
    atomic_write(target, '{"a": 1}')
    atomic_write(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01" and os.listdir(tmp_path) == ["endpoints.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() makes it, not the temp file's 0600
    atomic_write(tmp_path / "secret", "s", mode=0o640)
    assert (tmp_path / "secret").stat().st_mode & 0o777 == 0o640  # exactly the bits asked for


def test_the_default_mode_follows_the_umask_at_the_time_of_the_write(tmp_path):
    """Issue 43: launch.py sets the umask 077 after protocol.files is imported; a umask read once at import
    made every run file 0644 all the same."""
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "metrics.jsonl", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "metrics.jsonl").stat().st_mode & 0o777 == 0o600


def test_a_failing_writer_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "config.toml"
    target.write_text("old")

    def half(f):
        f.write(b"new, half")
        raise RuntimeError("writer died")
    with pytest.raises(RuntimeError):
        atomic_write_with(target, half)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["config.toml"]


@pytest.mark.integration
def test_a_full_disk_is_one_clean_error_and_leaves_the_old_file(tmp_path):
    with full_disk(tmp_path / "disk", size_kb=64) as disk:
        (disk / "state").write_text("old")
        with pytest.raises(WriteFailed) as caught:
            atomic_write(disk / "state", b"x" * (256 << 10))
        assert "cannot write" in str(caught.value) and "\n" not in str(caught.value)
        assert (disk / "state").read_text() == "old" and os.listdir(disk) == ["state"]


@pytest.mark.integration
def test_a_read_only_directory_is_one_clean_error(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "state").write_text("old")
    with read_only(folder):
        with pytest.raises(WriteFailed, match="cannot write"):
            atomic_write(folder / "state", "new")
        assert (folder / "state").read_text() == "old" and os.listdir(folder) == ["state"]


def test_run_files_are_appended_to_but_never_through_a_symlink(tmp_path):
    """Issue 60, point 7: metrics.jsonl and learner.log symlinked elsewhere had the run write where they pointed."""
    from protocol.files import open_append
    with open_append(tmp_path / "metrics.jsonl") as f:
        f.write("one\n")
    with open_append(tmp_path / "metrics.jsonl") as f:
        f.write("two\n")
    assert (tmp_path / "metrics.jsonl").read_text() == "one\ntwo\n"
    target = tmp_path / "root-only"
    target.write_text("kept\n")
    (tmp_path / "learner.log").symlink_to(target)
    with pytest.raises(WriteFailed, match="learner.log: it is a symbolic link"):
        open_append(tmp_path / "learner.log")
    assert target.read_text() == "kept\n"


def test_the_learners_logs_refuse_a_symlinked_run_file(tmp_path):
    from learner.report.metrics import MetricsWriter
    target = tmp_path / "elsewhere"
    (tmp_path / "metrics.jsonl").symlink_to(target)
    with pytest.raises(WriteFailed, match="symbolic link"):
        MetricsWriter(tmp_path)
    assert not target.exists()
