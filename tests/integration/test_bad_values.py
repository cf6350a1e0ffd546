"""issue 32, point 5: values and files a user may give, refused by launch.py in one line, exit 2, nothing
started and nothing written (they passed validation and crashed later, with a traceback)."""
from __future__ import annotations

import pytest

from tests.fs_faults import read_only
from tests.integration.cluster import run_launch

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("args, needle", [
    (["--set", "ppo.learning_rate=inf"], "ppo.learning_rate must be a finite number"),
    (["--set", "ppo.ent_coef=inf"], "ppo.ent_coef must be a finite number"),
    (["--set", "run.watchdog_s=inf"], "run.watchdog_s must be a finite number"),
    (["--seed", str(2**70)], "run.seed must be in [0, "),
    (["--set", "ppo.num_steps=1000000000"], "ppo.num_steps must be in [1, "),
    (["--set", "cluster.actor_timeout_s=1e-9"], "cluster.actor_timeout_s must be in [1, "),
    (["--set", "cluster.weights_address='tcp://127.0.0.1:99999'"], "PORT in [0, 65535]"),
    (["--set", "ppo.num_minibatches=100000"], "ppo.num_minibatches must be in [1, "),
    (["--set", "ppo.gamma"], "expected section.key=value"),
    (["--config", "DIR"], "is a directory, not a config file"),
    (["--config", "LATIN1"], "not UTF-8 text"),
])
def test_a_bad_value_or_file_is_one_line_exit_2_nothing_written(tmp_path, args, needle):
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b"[run]\nseed = 1\n# r\xe9sum\xe9\n")
    args = [{"DIR": str(tmp_path), "LATIN1": str(latin1)}.get(a, a) for a in args]
    run_dir = tmp_path / "run"
    config = [] if "--config" in args else ["--config", "configs/smoke.toml"]
    result = run_launch(*config, "--run-dir", str(run_dir), *args, timeout=60)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert not run_dir.exists()


def test_an_unwritable_run_directory_is_one_line_exit_2(tmp_path):
    """issue 32: an unwritable run directory gave a traceback."""
    parent = tmp_path / "ro"
    parent.mkdir()
    with read_only(parent):
        result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(parent / "run"), timeout=60)
        assert sorted(parent.iterdir()) == []
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot use {parent / 'run'}: "), lines
