"""Two "hosts" on one machine: the learner and an actor in separate network namespaces, joined by a veth
pair, talk over TCP with CURVE, and training proceeds (issue 5, item 7).

Needs root and iproute2 (`ip netns`); skipped with the reason otherwise (e.g. an unprivileged container).
"""
from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from protocol.security import generate_keypair
from tests.integration.cluster import ROOT, endpoints, kill_group, metrics, wait_for

pytestmark = pytest.mark.integration

LEARNER_IP, ACTOR_IP = "10.77.0.1", "10.77.0.2"
ADDRESS, WEIGHTS_ADDRESS = f"tcp://{LEARNER_IP}:5555", f"tcp://{LEARNER_IP}:5556"
SMOKE = ("--config", "configs/smoke.toml", "--actors", "0", "--total-steps", "10000000")
IP_TIMEOUT_S = 10
_serial = itertools.count()


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)


def _must(*args: str) -> None:
    """Run `ip ARGS`; skip the test (naming the command) when it fails: no privileges for network setup."""
    r = _ip(*args)
    if r.returncode != 0:
        pytest.skip(f"cannot set up network namespaces: `ip {' '.join(args)}` failed "
                    f"({r.returncode}): {(r.stderr or r.stdout).strip()}")


def _kill_netns_pids(ns: str) -> None:
    """SIGKILL whatever still runs inside our own namespace (only processes this test started can be there)."""
    r = _ip("netns", "pids", ns)
    for pid in r.stdout.split() if r.returncode == 0 else ():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@pytest.fixture
def netns_pair():
    """Namespaces NS_L (10.77.0.1/24) and NS_A (10.77.0.2/24) linked by a veth pair; always deleted after."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (running as uid %d)" % os.geteuid())
    if shutil.which("ip") is None:
        pytest.skip("no `ip` binary (iproute2) to create network namespaces")
    tag = f"{os.getpid()}x{next(_serial)}"
    ns_l, ns_a = f"ppo-l-{tag}", f"ppo-a-{tag}"
    veth_l, veth_a = f"pl{tag}"[:15], f"pa{tag}"[:15]  # interface names: at most 15 characters
    made: list[str] = []
    try:
        for ns in (ns_l, ns_a):
            _must("netns", "add", ns)
            made.append(ns)
        _must("link", "add", veth_l, "type", "veth", "peer", "name", veth_a)
        _must("link", "set", veth_l, "netns", ns_l)
        _must("link", "set", veth_a, "netns", ns_a)
        for ns, dev, ip in ((ns_l, veth_l, LEARNER_IP), (ns_a, veth_a, ACTOR_IP)):
            _must("-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _must("-n", ns, "link", "set", dev, "up")
            _must("-n", ns, "link", "set", "lo", "up")
        _must("netns", "exec", ns_a, "true")  # exec needs mount privileges too
        yield {"learner": ns_l, "actor": ns_a}
    finally:
        for ns in made:
            _kill_netns_pids(ns)
        _ip("link", "del", veth_l)  # only still here (in the root namespace) if moving it failed
        for ns in made:
            _ip("netns", "del", ns)  # deleting a namespace deletes the veth end inside it


def in_ns(ns: str, args: list[str], log: Path) -> subprocess.Popen:
    """Start `python ARGS` inside namespace `ns`, in its own process group, output to `log`."""
    with open(log, "w") as out:
        return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def test_learner_and_actor_in_separate_namespaces_train_over_curve(netns_pair, tmp_path):
    t_start = time.monotonic()
    ns_l, ns_a = netns_pair["learner"], netns_pair["actor"]
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    allowed.mkdir()
    learner_public, learner_secret = generate_keypair(keys, "learner")
    actor_public, actor_secret = generate_keypair(keys, "actor")
    _, stranger_secret = generate_keypair(keys, "stranger")  # a valid key pair, not in the allow-list
    shutil.copy(actor_public, allowed / actor_public.name)
    bind = ("--set", f"cluster.address='{ADDRESS}'", "--set", f"cluster.weights_address='{WEIGHTS_ADDRESS}'")

    # 1. binding beyond loopback without keys is refused before anything starts
    refused = in_ns(ns_l, ["launch.py", *SMOKE, "--run-dir", str(tmp_path / "refused"), *bind],
                    tmp_path / "refused.log")
    try:
        code = finish(refused, 30)
    finally:
        kill_group(refused)
    out = (tmp_path / "refused.log").read_text()
    assert code == 2, f"keyless non-loopback bind: exit {code}, expected 2:\n{out[-2000:]}"
    assert "CURVE" in out, out[-2000:]

    # 2. the learner (waiting for 2 remote env slots) in NS_L, an allowed actor in NS_A
    run_dir = tmp_path / "run"
    procs: list[subprocess.Popen] = []
    try:
        learner = in_ns(ns_l, ["launch.py", *SMOKE, "--run-dir", str(run_dir), *bind,
                               "--set", f"cluster.server_key='{learner_secret}'",
                               "--set", f"cluster.allowed_keys='{allowed}'", "--set", "cluster.min_envs=2"],
                        tmp_path / "launch.log")
        procs.append(learner)
        ep = wait_for(lambda: endpoints(run_dir), 60, "the learner's endpoints.json", learner)
        assert ep["address"] == ADDRESS, ep
        actor = in_ns(ns_a, ["-m", "actor", "--learner", ADDRESS, "--envs", "2", "--name", "remote",
                             "--server-key", str(learner_public), "--key", str(actor_secret), "--reconnect-s", "2",
                             "--join-timeout-s", "5"],
                      tmp_path / "actor.log")
        procs.append(actor)
        try:
            wait_for(lambda: len([r for r in metrics(run_dir) if r["actors"] == 1]) >= 2, 60,
                     "two updates with the remote actor", learner)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nlaunch.log:\n{(tmp_path / 'launch.log').read_text()[-2000:]}\n"
                                 f"actor.log:\n{(tmp_path / 'actor.log').read_text()[-2000:]}") from None
        assert actor.poll() is None, "the remote actor exited while training"
        rows = metrics(run_dir)
        assert all(r["actors"] == 1 and r["env_slots"] == 2 for r in rows), rows
        assert any("remote joined" in e for r in rows for e in r["events"]), [r["events"] for r in rows]

        # 3. from the actor's namespace: a key not in the allow-list, and no key at all, do not get in
        stranger = in_ns(ns_a, ["-m", "actor", "--learner", ADDRESS, "--envs", "3", "--name", "stranger",
                                "--server-key", str(learner_public), "--key", str(stranger_secret),
                                "--join-timeout-s", "3", "--reconnect-s", "0"], tmp_path / "stranger.log")
        plain = in_ns(ns_a, ["-m", "actor", "--learner", ADDRESS, "--envs", "3", "--name", "plain",
                             "--join-timeout-s", "3", "--reconnect-s", "0"], tmp_path / "plain.log")
        procs += [stranger, plain]
        for proc, name in ((stranger, "stranger"), (plain, "plain")):
            code = finish(proc, 30)
            log = (tmp_path / f"{name}.log").read_text()
            assert code == 1, f"the {name} actor: exit {code}, expected 1:\n{log[-2000:]}"
        assert "no answer" in (tmp_path / "stranger.log").read_text()
        before = metrics(run_dir)[-1]["update"]
        wait_for(lambda: metrics(run_dir)[-1]["update"] > before, 30, "one more update after the strangers", learner)
        rows = metrics(run_dir)
        assert all(r["actors"] == 1 and r["env_slots"] == 2 for r in rows), "a stranger's envs entered a rollout"
        assert not any("stranger" in e or "plain" in e for r in rows for e in r["events"])

        # 4. SIGTERM: the learner checkpoints, says goodbye and exits 0; the remote actor reads the goodbye
        # (not just the dropped connection, which would cost it its reconnection window) and exits 0
        os.kill(learner.pid, signal.SIGTERM)
        code = finish(learner, 30)
        assert code == 0, f"launch.py after SIGTERM: {code}\n{(tmp_path / 'launch.log').read_text()[-2000:]}"
        code = finish(actor, 20)
        assert code == 0, f"the remote actor: exit {code}, expected 0:\n{(tmp_path / 'actor.log').read_text()[-2000:]}"
        assert "learner said goodbye" in (tmp_path / "actor.log").read_text()
    finally:
        for proc in procs:
            kill_group(proc)
            finish(proc, 5)
    assert time.monotonic() - t_start < 120
