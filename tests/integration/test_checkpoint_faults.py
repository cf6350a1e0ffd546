"""issue 32, point 6, with a real run: a full disk under RUN/checkpoints (a tiny tmpfs, root only) during
training gave a traceback and left a temporary checkpoint. Now: one line per failed write naming the kept
checkpoint, training goes on (nothing is lost that stopping would keep), no temp file; a final checkpoint
that cannot be written makes the exit code 1."""
from __future__ import annotations

import pytest

from tests.fs_faults import full_disk
from tests.integration.cluster import NO_RESTART, assert_session_gone, launch, metrics, stop, wait_for

pytestmark = pytest.mark.integration


def test_a_full_disk_during_training_keeps_the_last_checkpoint_and_training_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    # MLP 2 x 256: a checkpoint (weights + Adam's moments) of ~1.7 MB; the disk holds one, not two
    with full_disk(run_dir / "checkpoints", size_kb=2500) as disk:
        proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "10000000",
                      NO_RESTART, "0", "--set", "model.hidden=256", "--set", "run.checkpoint_every=1",
                      "--set", "log.keep_checkpoints=1")
        log = run_dir / "learner.log"
        try:
            wait_for(lambda: log.exists() and "not written" in log.read_text(), 120, "a failed checkpoint write", proc)
            failed_at = len(metrics(run_dir))
            wait_for(lambda: len(metrics(run_dir)) >= failed_at + 2, 60, "training to go on", proc)
        finally:
            out = stop(proc)
        names = sorted(p.name for p in disk.iterdir())
    assert names == ["ckpt_00000001.pt"] or names == ["best.json", "best.pt", "ckpt_00000001.pt"], names
    errors = [line for line in log.read_text().splitlines() if " ERROR " in line]
    assert errors and all("not written (cannot write" in e and "the newest kept is ckpt_00000001.pt" in e
                          for e in errors), errors
    assert "No space left on device" in errors[0], errors[0]
    assert "Traceback" not in out and "Traceback" not in log.read_text(), out[-3000:]
    assert proc.returncode == 1, out[-2000:]  # the final checkpoint could not be written either
    assert_session_gone(proc.pid)


def test_a_full_disk_under_the_whole_run_directory_stops_the_run_in_one_line(tmp_path):
    """The metrics and episode files on a full disk (seen with benchmarks/chaos.py: a traceback per log line,
    then the learner's own): one ERROR line, exit 1, no traceback, no process left."""
    import os
    with full_disk(tmp_path / "fs", size_kb=8192) as disk:
        run_dir = disk / "run"
        proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "10000000",
                      NO_RESTART, "0", "--set", "run.checkpoint_every=1000")
        try:
            wait_for(lambda: len(metrics(run_dir)) >= 2, 120, "two updates", proc)
            with open(disk / "filler", "wb") as f:
                try:
                    while f.write(b"\0" * 65536):
                        f.flush()
                except OSError:
                    pass
            proc.wait(timeout=60)
        finally:
            out = stop(proc)
            os.unlink(disk / "filler")
    assert proc.returncode == 1, out[-2000:]
    assert "the run stops; nothing is lost beyond the newest checkpoint" in out, out[-2000:]
    assert "No space left on device" in out, out[-2000:]
    assert "Traceback" not in out and "Logging error" not in out, out[-3000:]
    assert_session_gone(proc.pid)


def test_a_full_disk_that_stopped_the_learner_is_waited_out_and_training_goes_on_without_a_person(tmp_path):
    """issue 43, point 5: the learner stops on the full disk (as above); launch.py says once that it waits for
    space, restarts the learner from its newest checkpoint when there is room again, and the run goes on; a
    clean stop then ends it with exit 0. The console goes to a file off the full disk, read as it grows."""
    import os
    import signal
    import subprocess
    import sys

    from launcher.restarts import last_update  # the last complete line: the full disk may cut one short
    from tests.integration.cluster import ROOT, kill_group
    console = tmp_path / "console.log"
    with full_disk(tmp_path / "fs", size_kb=8192) as disk, open(console, "w") as out:
        run_dir, filler = disk / "run", disk / "filler"
        proc = subprocess.Popen([sys.executable, "launch.py", "--config", "configs/cartpole.toml", "--run-dir",
                                 str(run_dir), "--total-steps", "10000000", "--set", "run.checkpoint_every=2"],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            wait_for(lambda: last_update(run_dir / "metrics.jsonl") >= 3, 120, "a checkpoint, then an update", proc)
            with open(filler, "wb") as f:
                try:
                    while f.write(b"\0" * 65536):
                        f.flush()
                except OSError:  # ENOSPC: the disk is full
                    pass
            wait_for(lambda: "waiting for space before the restart" in console.read_text(), 90,
                     "launch.py to wait for space", proc)
            last = last_update(run_dir / "metrics.jsonl")
            os.unlink(filler)
            wait_for(lambda: last_update(run_dir / "metrics.jsonl") >= last + 2, 120,
                     "training again after the restart", proc)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            finally:
                kill_group(proc)
                if filler.exists():
                    os.unlink(filler)
    text = console.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert text.count("waiting for space before the restart") == 1, text[-3000:]
    assert "has room again: restarting the learner" in text, text[-3000:]
    assert "restart 1 of 3 within an hour (1 in all), from its newest checkpoint" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert_session_gone(proc.pid)
