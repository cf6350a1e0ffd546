"""An actor host installs light (issue 13, point 6): the package with no extras, in a fresh venv that has no
torch, is enough for `ppo-cluster actor` (the installed command, issue 42) to join a real learner and be trained on.

The install goes through pip exactly as on an actor host (`pip install PATH`, dependencies resolved from the
base list in pyproject.toml), from a copy of the sources so that the build leaves nothing in the checkout.
The actor then runs from outside the checkout, so it imports the installed copy, not the working tree.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocol.security import generate_keypair
from tests.integration.cluster import ROOT, assert_no_stragglers, kill_group, launch, metrics, wait_for

pytestmark = pytest.mark.integration

INSTALL_TIMEOUT_S = 420
TOTAL_STEPS = 128  # smoke config: 2 envs x 16 steps = 32 agent steps per update, so 4 updates, then goodbye
# What pip prints when it could not reach an index: only these make the test skip instead of fail.
NETWORK_ERRORS = ("NewConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "Max retries exceeded",
                  "Temporary failure in name resolution", "Name or service not known", "Network is unreachable",
                  "Connection refused", "ProxyError")
SOURCES = ("pyproject.toml", "README.md", "launch.py", "actor", "launcher", "learner", "protocol", "ppo_cluster")


def _light_venv(tmp_path: Path) -> Path:
    """A fresh venv (no system site-packages) with `pip install <copy of the repo>` and no extras."""
    src, venv = tmp_path / "src", tmp_path / "light-venv"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # the project venv's pip installs into the fresh venv (pip >= 22.3 `--python`): as a pip of its own would,
    # with the same resolver and build isolation, minus the seconds ensurepip takes
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-input",
           "--disable-pip-version-check", str(src)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"pip install did not finish in {INSTALL_TIMEOUT_S}s:\n{exc.stdout}\n{exc.stderr}")
    out = r.stdout + r.stderr
    if r.returncode != 0:
        hits = [marker for marker in NETWORK_ERRORS if marker in out]
        if hits:
            pytest.skip(f"pip could not reach a package index ({', '.join(hits)}): {out.strip()[-1500:]}")
        raise AssertionError(f"`pip install {src}` (no extras) failed ({r.returncode}):\n{out[-4000:]}")
    return python


def _light_python(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_actor_only_install_without_torch_trains_with_a_learner(tmp_path):
    started = time.monotonic()
    run_dir, keys, allowed = tmp_path / "run", tmp_path / "keys", tmp_path / "allowed"
    # CURVE as between hosts (docs/scaling.md, "Actors on other machines"): the actor host's half runs in the light venv
    learner_public, learner_secret = generate_keypair(keys, "learner")
    actor_public, actor_secret = generate_keypair(keys, "light")
    allowed.mkdir()
    shutil.copy2(actor_public, allowed / actor_public.name)
    # the learner (project venv, with torch) starts first and waits for 2 env slots while pip installs
    proc = launch("--config", "configs/smoke.toml", "--actors", "0", "--total-steps", str(TOTAL_STEPS),
                  "--run-dir", str(run_dir), "--set", "cluster.min_envs=2",
                  "--set", f"cluster.server_key='{learner_secret}'", "--set", f"cluster.allowed_keys='{allowed}'")
    actor = None
    try:
        python = _light_venv(tmp_path)
        installed = time.monotonic()
        outside = tmp_path / "elsewhere"  # not the checkout: imports resolve to the installed package
        outside.mkdir()

        no_torch = _light_python(python, "import torch", outside)
        assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr, no_torch.stderr
        for heavy in ("tensorboard", "matplotlib", "imageio", "pygame"):
            r = _light_python(python, f"import {heavy}", outside)
            assert r.returncode != 0 and f"No module named '{heavy}'" in r.stderr, (heavy, r.stderr)
        # the actor's whole import graph, and a classic-control env stepped without pygame (no rendering)
        probe = _light_python(python, (
            "import sys, actor, actor.__main__, protocol.security\n"
            "from actor.envs import make_env\nfrom protocol.settings import EnvSettings\n"
            "env = make_env(EnvSettings(env_id='CartPole-v1'), seed=1); env.reset()\n"
            "env.step(env.action_space.sample()); env.close()\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'learner', 'tensorboard', 'matplotlib', 'imageio', 'pygame'))\n"
            "assert not bad, bad\nprint(actor.__file__)"), outside)
        assert probe.returncode == 0, probe.stderr
        assert "site-packages" in probe.stdout and str(ROOT) not in probe.stdout, probe.stdout

        command = python.parent / "ppo-cluster"  # the installed command, without torch
        listed = subprocess.run([command, "--help"], cwd=outside, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr[-2000:]
        assert all(f"\n    {c} " in listed.stdout for c in ("train", "actor", "evaluate", "plot")), listed.stdout
        address = wait_for(lambda: _endpoints(run_dir), 90, "the learner's endpoints", proc)["address"]
        actor = subprocess.Popen([command, "actor", "--learner", address, "--envs", "2",
                                  "--name", "light", "--reconnect-s", "0", "--server-key", str(learner_public),
                                  "--key", str(actor_secret)], cwd=outside,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=120)  # total_steps reached: goodbye, launch.py exits
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run did not reach {TOTAL_STEPS} steps in 120s (actor exit code "
                                 f"{actor.poll()}):\n{_tail(run_dir)}")
        assert proc.returncode == 0, out[-3000:]
        actor_out, _ = actor.communicate(timeout=30)
        assert actor.returncode == 0 and "said goodbye" in actor_out, actor_out[-3000:]

        rows = metrics(run_dir)
        assert rows and rows[-1]["env_steps"] >= TOTAL_STEPS, rows[-1:]
        assert len(rows) >= 4 and all(r["actors"] == 1 and r["env_slots"] == 2 for r in rows), rows
        assert any("light joined" in e for r in rows for e in r["events"]), [r["events"] for r in rows]
        assert_no_stragglers(run_dir)
        print(f"\nlight install {installed - started:.1f}s, whole test {time.monotonic() - started:.1f}s")
    finally:
        for p in (actor, proc):
            if p is not None:
                kill_group(p)  # a no-op after a clean exit; otherwise nothing of this run outlives the test
                if p.returncode is None:
                    p.communicate(timeout=30)


def _endpoints(run_dir: Path):
    path = run_dir / "endpoints.json"
    return path.exists() and json.loads(path.read_text())


def _tail(run_dir: Path) -> str:
    log = run_dir / "learner.log"
    return log.read_text()[-3000:] if log.exists() else "(no learner.log)"
