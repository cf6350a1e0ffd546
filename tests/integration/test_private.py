"""Issue 43 point 3: with the default config, nothing of a run is readable or writable by another local user,
and a killed learner's socket directory is removed by the next start."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from protocol.private_dirs import PID_FILE
from tests.integration.cluster import ROOT, endpoints, kill_group, launch, metrics, run_launch, stop, wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Unix sockets and /proc: Linux")]

NOBODY = 65534
TINY = ("--actors", "1", "--envs-per-actor", "2", "--total-steps", "10000000", "--device", "cpu",
        "--set", "ppo.num_steps=16", "--set", "ppo.update_epochs=1", "--set", "ppo.num_minibatches=1",
        "--set", "run.torch_threads=1", "--set", "eval.every=1")
AS_NOBODY = """
import json, os, socket, sys
run_dir, sockets, control = sys.argv[1], sys.argv[2:-1], sys.argv[-1]
def attempt(f):
    try:
        f()
        return "done"
    except PermissionError:
        return "refused"
def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
found = {"list run dir": attempt(lambda: os.listdir(run_dir)),
         "read metrics": attempt(lambda: open(os.path.join(run_dir, "metrics.jsonl")).read()),
         "write run dir": attempt(lambda: open(os.path.join(run_dir, "x"), "w").close()),
         "list parent (control)": attempt(lambda: os.listdir(control))}
found.update({f"connect {os.path.basename(p)}": attempt(lambda p=p: connect(p)) for p in sockets})
print(json.dumps(found))
"""


def _as_nobody(run_dir: Path, sockets: list[str], control: Path) -> dict:
    """What a process of uid 65534 may do, with the system's Python (the venv's may be out of its reach)."""
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    out = subprocess.run([python, "-I", "-c", AS_NOBODY, str(run_dir), *sockets, str(control)], capture_output=True,
                         text=True, timeout=30, preexec_fn=lambda: (os.setgroups([]), os.setgid(NOBODY),
                                                                    os.setuid(NOBODY)))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _tcp_listeners(pids: list[int]) -> list[str]:
    """The listening TCP sockets (IPv4 and IPv6) that any of these processes holds."""
    listening = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                listening[fields[9]] = fields[1]
    held = []
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except (FileNotFoundError, ProcessLookupError):
            continue
        held += [listening[link[8:-1]] for link in links if link.startswith("socket:[") and link[8:-1] in listening]
    return held


def _run_pids(run_dir: Path) -> list[int]:
    info = json.loads((run_dir / "processes.json").read_text())
    return [info["launch"], info["learner"], *info["actors"].values(),
            *([info["evaluator"]] if info.get("evaluator") else [])]


def _open_modes(run_dir: Path) -> list[str]:
    """Everything under run_dir that another user's bits allow anything on."""
    return [f"{p.relative_to(run_dir)} {stat.filemode(p.lstat().st_mode)}" for p in [run_dir, *run_dir.rglob("*")]
            if p.lstat().st_mode & 0o077]


def test_a_default_run_shares_nothing_with_another_user():
    parent = Path(tempfile.mkdtemp(prefix="ppo-private-test-"))  # not under pytest's own 0700 tmp directory
    os.chmod(parent, 0o755)  # so that only the run directory's own mode can keep another user out
    run_dir = parent / "run"
    proc = launch("--run-dir", str(run_dir), *TINY)
    try:
        info = wait_for(lambda: endpoints(run_dir), 120, "endpoints.json", proc)
        wait_for(lambda: len(metrics(run_dir)) >= 2 and (run_dir / "processes.json").exists(), 180,
                 "two updates", proc)
        sockets = [info["address"], info["weights_address"]]
        assert all(a.startswith("ipc:///") for a in sockets), sockets
        folder = Path(sockets[0][len("ipc://"):]).parent
        assert Path(sockets[1][len("ipc://"):]).parent == folder
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and (folder / PID_FILE).read_text() == f"{info['pid']}\n"
        assert _open_modes(run_dir) == []  # 0700 directories, 0600 files (checkpoints, logs, metrics)
        assert _tcp_listeners(_run_pids(run_dir)) == []  # nothing to reach over loopback either
        if os.getuid() == 0:
            found = _as_nobody(run_dir, [s[len("ipc://"):] for s in sockets], parent)
            assert found.pop("list parent (control)") == "done", found
            assert set(found.values()) == {"refused"}, found
        else:
            pytest.skip("needs root to try as another user (uid 65534); the modes above hold")
    finally:
        out = stop(proc)
        shutil.rmtree(parent, ignore_errors=True)
    assert proc.returncode == 0, out[-3000:]
    assert not folder.exists()  # removed at a clean exit


KILLED = """
import os, sys, time
from protocol.transport import local_addresses
print(local_addresses("local", "local")[1], flush=True)
time.sleep(120)
"""


def test_a_killed_learners_socket_directory_is_removed_by_the_next_start():
    base = Path(tempfile.mkdtemp(prefix="ppo-xdg-"))  # short: pytest's tmp_path is too long a socket directory
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_RUNTIME_DIR": str(base)}
    victim = subprocess.Popen([sys.executable, "-c", KILLED], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        folder = Path(victim.stdout.readline().strip()[len("ipc://"):]).parent
        assert folder.parent == base and (folder / PID_FILE).exists()
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        assert folder.exists()  # nobody removed it: a kill -9 runs no finalizer
        code = "from protocol.transport import local_addresses; print(local_addresses('local', 'local')[0])"
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=60, check=True)
        assert out.stdout.startswith(f"ipc://{base}/") and not folder.exists()
    finally:
        kill_group(victim)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_root_does_not_take_over_another_users_run_directory(tmp_path):
    """Issue 60, point 7: as root, a run directory that nobody made (0777, metrics.jsonl and learner.log symlinked
    into a root-only directory) was trained in, written through the symlinks, and left nobody's. Now: exit 2, one
    line, nothing touched."""
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for name in ("metrics.jsonl", "learner.log"):
        (theirs / name).symlink_to(private / name)
        os.lchown(theirs / name, NOBODY, NOBODY)
    os.chown(theirs, NOBODY, NOBODY)
    os.chmod(theirs, 0o777)
    for where in (("--run-dir", str(theirs), "--config", "configs/smoke.toml"), ("--resume", str(theirs))):
        done = run_launch(*where, timeout=60)
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, done.stdout[-2000:]
        assert lines[0].startswith("error: run directory") and "uid 65534" in lines[0], lines
    st = theirs.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o777)
    assert sorted(p.name for p in theirs.iterdir()) == ["learner.log", "metrics.jsonl"] and list(private.iterdir()) == []
