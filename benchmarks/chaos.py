"""Fault injection (issue 32): one small CartPole training run taken through a scripted sequence of faults.

    python benchmarks/chaos.py                                  # every fault, about 8 minutes on 2 cores
    python benchmarks/chaos.py --faults kill-actor,ghost,greedy # a subset, in the order given

The run: configs/cartpole.toml (2 actors x 4 envs) with 2 collector processes, cluster.actor_timeout_s=2 and a
checkpoint every 5 updates, in a temporary directory (on a 64 MB tmpfs when root may mount one: the disk-full
fault fills it). Each fault waits for the run to train with all its 8 env slots, injects the fault, and measures

  * detected: seconds until the system showed it noticed (the event in metrics.jsonl, the refusal answered,
    the run ending with its reason);
  * recovered: seconds until training went on again with all 8 env slots (where the fault ended the learner:
    after launch.py restarted it from its newest checkpoint, with no person involved; issue 43);
  * updates lost, episodes lost: those past the checkpoint a restart went on from (0 when the run went on);
  * memory peak: the largest resident memory of the learner and its collector processes meanwhile (MB).

A fault is survived when training went on with every env slot within its deadline and no checkpoint was lost
(the newest checkpoint before the fault still loads, or a newer one does). The last line says how many were,
e.g. "12 of 12 faults survived, 0 checkpoints lost". Exit status 0 when all were, 1 otherwise.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for path in (str(HERE), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)

from learner.config import RunConfig  # noqa: E402
from protocol.transport import connect_dealer  # noqa: E402
from procfs import kill, kill_group, read_metrics, read_rss_mb  # noqa: E402

SLOTS = 8  # configs/cartpole.toml: 2 actors x 4 envs
RUN_SETTINGS = ["--config", "configs/cartpole.toml", "--set", "cluster.collectors=2", "--set", "cluster.actor_timeout_s=2",
                "--set", "run.checkpoint_every=5"]
# One run takes every fault in turn, up to seven of which end the learner within the hour (stop-collector,
# kill-collector, disk-full, kill-learner, stop-learner, stop-learner-at-start twice): the launcher's default of 3
# restarts per hour (tested on its own in tests/launcher/test_restarts.py) would end the run at the fourth.
LAUNCH = [*RUN_SETTINGS, "--total-steps", "100000000", "--max-learner-restarts", "20"]
DEADLINE_S = 60.0  # for each wait of a fault: detection, recovery
LEARNER_SILENT_S = RunConfig().learner_silent_s  # the runs keep launch.py's default


class Failed(Exception):
    """A wait of a fault ran past its deadline: the fault is not survived."""


@dataclass
class Row:
    fault: str
    detected_s: float | None = None
    recovered_s: float | None = None
    updates_lost: int = 0
    episodes_lost: int = 0
    memory_peak_mb: float = 0.0
    survived: bool = False
    note: str = ""


class Run:
    """The training run under test: (re)started with launch.py, watched through its run directory."""

    def __init__(self, run_dir: Path, logs: Path, launch: list[str] = LAUNCH):
        """`logs`: where each start's console output goes (not in run_dir, which the disk-full fault fills);
        `launch`: launch.py's arguments but the run directory."""
        self.run_dir, self.logs, self.proc, self.starts, self.peak = run_dir, logs, None, 0, 0.0
        self.launch = launch
        self._sampling = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def start(self, resume: bool) -> None:
        self.starts += 1
        where = ["--resume", str(self.run_dir)] if resume else ["--run-dir", str(self.run_dir)]
        console = open(self.logs / f"console-{self.starts}.txt", "w")
        self.proc = subprocess.Popen([sys.executable, "launch.py", *self.launch, *where], cwd=REPO, stdout=console,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._sampling.set()

    def console(self) -> str:
        return (self.logs / f"console-{self.starts}.txt").read_text(errors="replace")

    def live(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rows(self) -> list[dict]:
        return read_metrics(self.run_dir / "metrics.jsonl")

    def last(self) -> dict:
        rows = self.rows()
        return rows[-1] if rows else {"update": 0, "episodes": 0}

    def info(self, name: str) -> dict:
        try:
            return json.loads((self.run_dir / name).read_text())
        except (OSError, ValueError):
            return {}

    def server_pids(self) -> list[int]:
        info = self.info("endpoints.json")
        return [info.get("pid", 0), *(c["pid"] for c in info.get("collectors", []) if c["pid"] != info.get("pid"))]

    def _sample(self) -> None:
        while True:
            self._sampling.wait()
            mb = sum(read_rss_mb(p) or 0.0 for p in self.server_pids() if p)
            self.peak = max(self.peak, mb)
            time.sleep(0.2)

    def take_peak(self) -> float:
        peak, self.peak = self.peak, 0.0
        return round(peak, 1)

    def trained_after(self, update: int) -> bool:
        """An update past `update` with every env slot in it."""
        return any(r["update"] > update and r["env_slots"] == SLOTS for r in self.rows())

    def event_after(self, update: int, text: str) -> bool:
        return any(r["update"] > update and any(text in e for e in r.get("events", [])) for r in self.rows())

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.live():
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        kill_group(self.proc.pid)
        self.proc.wait()
        self._sampling.clear()
        return self.proc.returncode


def wait(predicate, what: str, since: float, timeout: float = DEADLINE_S) -> float:
    """Seconds from `since` until predicate() holds (polled every 0.1 s); Failed past the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return round(time.monotonic() - since, 1)
        time.sleep(0.1)  # polling files another process writes, not synchronization
    raise Failed(f"no {what} within {timeout:g}s")


def newest_checkpoint(run_dir: Path) -> int:
    """The update of the newest checkpoint that loads (-1: none)."""
    from learner.weights import checkpoint
    path, _, _ = checkpoint.load_newest(run_dir)
    return -1 if path is None else int(path.stem.split("_")[-1])


def ready(run: Run) -> None:
    """The run is training with every env slot (started again with --resume if a fault ended the whole run)."""
    if not run.live():
        run.start(resume=any((run.run_dir / "checkpoints").glob("ckpt_*.pt")))
    u = run.last()["update"]
    wait(lambda: run.trained_after(u), "update with every env slot", time.monotonic(), timeout=120)


def restarted(run: Run, row: Row, before: dict, t0: float, old: int) -> None:
    """The fault ended the learner (pid `old`): count what was lost, and time from t0 until launch.py, with no
    person involved, has started it again from its newest checkpoint and it trained past that."""
    rows = {r["update"]: r for r in run.rows()}  # read before the new learner drops the rows past `kept`
    last = max(rows) if rows else 0
    kept = newest_checkpoint(run.run_dir)
    row.updates_lost = max(0, last - kept)
    row.episodes_lost = max(0, rows.get(last, before).get("episodes", 0) - rows.get(kept, before).get("episodes", 0))
    wait(lambda: run.info("endpoints.json").get("pid") not in (None, old) or not run.live(), "restarted learner", t0,
         timeout=120)
    if not run.live():
        raise Failed(f"the run ended (exit {run.proc.returncode}) instead of restarting its learner")
    row.recovered_s = wait(lambda: run.trained_after(kept), "update after the restart", t0, timeout=120)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ----------------------------------------------------------------------------------------------- the faults

def kill_actor(run: Run, row: Row) -> None:
    u, pid, t0 = run.last()["update"], run.info("processes.json")["actors"]["0"], time.monotonic()
    kill(pid, signal.SIGKILL)
    row.detected_s = wait(lambda: run.event_after(u, "actor-0 left"), "retirement of actor-0", t0)
    row.recovered_s = wait(lambda: run.event_after(u, "actor-0 joined") and run.trained_after(run.last()["update"] - 1),
                           "restarted actor-0 back", t0)


def stop_actor(run: Run, row: Row) -> None:
    u, pid, t0 = run.last()["update"], run.info("processes.json")["actors"]["1"], time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        row.detected_s = wait(lambda: run.event_after(u, "actor-1 left: silent"), "retirement of actor-1", t0)
    finally:
        os.kill(pid, signal.SIGCONT)
    row.recovered_s = wait(lambda: run.event_after(u, "actor-1 joined") and run.trained_after(run.last()["update"] - 1),
                           "actor-1 rejoined", t0)


def _client(address: str):
    import zmq
    ctx = zmq.Context()
    return ctx, connect_dealer(ctx, address, 64 << 20)


def _answer(sock, timeout_s: float = 30.0):
    from protocol import messages as m
    if not sock.poll(int(timeout_s * 1000)):
        raise Failed("the learner did not answer")
    return m.decode(sock.recv_multipart())


@contextlib.contextmanager
def _welcomed(run: Run, envs: int, name: str):
    """A client of our own that handshakes and is welcomed, following one Redirect as an actor does (with
    collector processes the first one sends a joiner to the one with the fewest env slots): yields (socket,
    the last update, the start time)."""
    from protocol import messages as m
    ctx, sock = _client(run.info("endpoints.json")["address"])
    try:
        u, t0 = run.last()["update"], time.monotonic()
        sock.send_multipart(m.encode(m.Handshake(envs, name)))
        answer = _answer(sock)
        if isinstance(answer, m.Redirect):
            sock.close(linger=0)
            sock = connect_dealer(ctx, answer.address, 64 << 20)
            sock.send_multipart(m.encode(m.Handshake(envs, name)))
            answer = _answer(sock)
        if not isinstance(answer, m.Welcome):
            raise Failed(f"the {name} was not welcomed ({type(answer).__name__})")
        yield sock, u, t0
    finally:
        ctx.destroy(linger=0)


GHOSTS = itertools.count(1)


def ghost(run: Run, row: Row) -> None:
    """A new client each time (its own name): a peer retired for silence that comes back under the same name is
    on probation (issue 60), which the soak's second ghost is not meant to test."""
    name = f"ghost-{next(GHOSTS)}"
    with _welcomed(run, 4, name) as (sock, u, t0):
        row.detected_s = wait(lambda: run.event_after(u, f"{name} left: silent"), "retirement of the ghost", t0)
        row.recovered_s = row.detected_s  # its slots are free again from then on


def greedy(run: Run, row: Row) -> None:
    from protocol import messages as m
    ctx, sock = _client(run.info("endpoints.json")["address"])
    try:
        u, t0 = run.last()["update"], time.monotonic()
        sock.send_multipart(m.encode(m.Handshake(4092, "greedy")))
        answer = _answer(sock)
        if not isinstance(answer, m.Error):
            raise Failed(f"the greedy claim was answered {type(answer).__name__}")
        row.detected_s, row.note = round(time.monotonic() - t0, 1), answer.reason[:60]
        row.recovered_s = wait(lambda: run.trained_after(u), "update after the claim", t0)
    finally:
        ctx.destroy(linger=0)


def flood(run: Run, row: Row) -> None:
    import zmq
    address, t0 = run.info("endpoints.json")["address"], time.monotonic()
    rejected = run.last().get("rejected_messages", 0)
    ctx = zmq.Context()
    try:
        for i in range(50):  # 50 identities x 100 malformed messages, some of them large
            ctx_sock = ctx.socket(zmq.DEALER)
            ctx_sock.setsockopt(zmq.LINGER, 0)
            ctx_sock.connect(address)
            for j in range(100):
                ctx_sock.send_multipart([os.urandom(16 if j % 10 else 1 << 16), b"\x00" * (j % 7)])
        row.detected_s = wait(lambda: run.last().get("rejected_messages", 0) > rejected, "rejections counted", t0)
        after = run.last()["update"]
        row.recovered_s = wait(lambda: run.trained_after(after), "update after the flood", t0)
        row.note = f"{run.last().get('rejected_messages', 0) - rejected} rejected"
    finally:
        ctx.destroy(linger=0)


def handshake_flood(run: Run, row: Row) -> None:
    """2,000 well-formed handshakes from one identity (issue 60): a few answered, the rest struck until a ban; the
    log and the metrics lines grow by a bounded amount (before: every one welcomed, two log lines each)."""
    from protocol import messages as m
    log_lines = len((run.run_dir / "learner.log").read_text(errors="replace").splitlines())
    rejected, t0 = run.last().get("rejected_messages", 0), time.monotonic()
    ctx, sock = _client(run.info("endpoints.json")["address"])
    try:
        for _ in range(2000):
            sock.send_multipart(m.encode(m.Handshake(1, "flood")))
        row.detected_s = wait(lambda: run.last().get("rejected_messages", 0) - rejected >= 1900, "the flood struck", t0)
        after = run.last()["update"]
        row.recovered_s = wait(lambda: run.trained_after(after), "update after the flood", t0)
    finally:
        ctx.destroy(linger=0)
    grown = len((run.run_dir / "learner.log").read_text(errors="replace").splitlines()) - log_lines
    widest = max(len(json.dumps(r)) for r in run.rows())
    row.note = f"{grown} log lines, widest metrics line {widest / 1024:.1f} KB"
    if grown > 200 or widest > 64 << 10:
        raise Failed(f"the flood cost {grown} log lines, a metrics line of {widest} bytes")


def _updates_per_s(rows: list[dict]) -> float:
    last = rows[-10:]
    return (last[-1]["update"] - last[0]["update"]) / max(last[-1]["elapsed_s"] - last[0]["elapsed_s"], 1e-9)


def _silent_client(address: str, seconds: float, retry_s: float = 2.5) -> int:
    """A client that joins with 1 env (following a Redirect), sends its first report and never answers, and rejoins
    as soon as it is retired; told to ask again later, it does after retry_s. Returns its welcomes."""
    import numpy as np
    from protocol import messages as m
    ctx, sock = _client(address)
    welcomes, deadline = 0, time.monotonic() + seconds
    try:
        sock.send_multipart(m.encode(m.Handshake(1, "silent")))
        while time.monotonic() < deadline:
            if not sock.poll(100):
                continue
            msg = m.decode(sock.recv_multipart())
            if isinstance(msg, m.Redirect):
                sock.close(linger=0)
                sock = connect_dealer(ctx, msg.address, 64 << 20)
            elif isinstance(msg, m.Welcome):
                welcomes += 1
                sock.send_multipart(m.encode(m.StepReport(0, np.zeros((1, 4), np.float32), np.zeros(1, np.float32),
                                                          np.zeros(1, bool), np.zeros(1, bool), first=True)))
                continue
            elif not (isinstance(msg, m.Error) and msg.rejoin):
                continue  # actions: never answered
            elif "probation" in msg.reason:
                time.sleep(retry_s)  # asking again later, as told: the client's own pace
            sock.send_multipart(m.encode(m.Handshake(1, "silent")))
    finally:
        ctx.destroy(linger=0)
    return welcomes


def silent_rejoin(run: Run, row: Row) -> None:
    """For 20 s a client joins, falls silent and rejoins at once (issue 60: the run's updates per minute fell from
    683 to 15, every rollout waiting a whole cluster.actor_timeout_s for it). Survived: a few welcomes, and the run
    keeps at least a quarter of its pace meanwhile."""
    before, u, t0 = _updates_per_s(run.rows()), run.last()["update"], time.monotonic()
    welcomes = []
    client = threading.Thread(target=lambda: welcomes.append(_silent_client(run.info("endpoints.json")["address"], 20.0)))
    client.start()
    try:
        row.detected_s = wait(lambda: run.event_after(u, "silent left: silent"), "retirement of the silent client", t0)
    finally:
        client.join()
    welcomes = welcomes[0] if welcomes else 0
    pace = len([r for r in run.rows() if r["update"] > u]) / (time.monotonic() - t0) / max(before, 1e-9)
    row.note = f"welcomed {welcomes} times in 20 s; {pace:.0%} of the pace before"
    after = run.last()["update"]
    row.recovered_s = wait(lambda: run.trained_after(after), "update after the client", t0)
    if welcomes > 5 or pace < 0.25:
        raise Failed("the silent client held the run up")


def big_flood(run: Run, row: Row) -> None:
    """8 peers x 8 junk messages of 60 MB, under cluster.max_message_mb (issue 60: a CartPole learner grew from 0.35
    to 1.16 GB, each peer's queue holding 1,000 messages of up to 64 MB). Survived: the learner and its
    collectors grow by less than 100 MB (their peak resident memory, VmHWM: no transient peak missed)."""
    import zmq
    address, u, t0, pids = run.info("endpoints.json")["address"], run.last()["update"], time.monotonic(), run.server_pids()
    base = [read_rss_mb(p, "VmHWM") or 0.0 for p in pids]
    junk, ctx = os.urandom(60 << 20), zmq.Context()
    try:
        for _ in range(8):
            sock = ctx.socket(zmq.DEALER)
            sock.connect(address)
            for _ in range(8):
                sock.send(junk, copy=False)
            sock.close(linger=int(DEADLINE_S * 1000))  # every message sent (or refused) before term() returns
    finally:
        ctx.term()
    row.detected_s = round(time.monotonic() - t0, 1)  # all sent: nothing to notice, zmq drops such a peer unread
    row.recovered_s = wait(lambda: run.trained_after(u + 2), "updates after the flood", t0)
    grown = max((read_rss_mb(p, "VmHWM") or 0.0) - b for p, b in zip(pids, base))
    row.note = f"the learner or a collector grew {grown:.0f} MB at its peak"
    if grown > 100:
        raise Failed(f"the junk grew the learner by {grown:.0f} MB")


def out_of_turn(run: Run, row: Row) -> None:
    import numpy as np
    from protocol import messages as m
    with _welcomed(run, 1, "rogue") as (sock, u, t0):
        sock.send_multipart(m.encode(m.StepReport(0, np.zeros((1, 4), np.float32), np.zeros(1, np.float32),
                                                  np.zeros(1, bool), np.zeros(1, bool))))  # before its first
        answer = _answer(sock)
        if not isinstance(answer, m.Error):
            raise Failed(f"out-of-turn report answered {type(answer).__name__}")
        row.detected_s = round(time.monotonic() - t0, 1)
        row.recovered_s = wait(lambda: run.trained_after(u), "update after the offence", t0)


def second_run(run: Run, row: Row) -> None:
    """Another launch.py on the held directory must be refused, and the first run go on untouched."""
    u, t0 = run.last()["update"], time.monotonic()
    for where in (["--run-dir", str(run.run_dir)], ["--resume", str(run.run_dir)]):
        second = subprocess.run([sys.executable, "launch.py", *run.launch, *where], cwd=REPO, capture_output=True,
                                text=True, timeout=DEADLINE_S, start_new_session=True)
        if second.returncode != 2:
            raise Failed(f"a second run with {where[0]} exited {second.returncode}: {second.stdout[-300:]}")
    row.detected_s = round(time.monotonic() - t0, 1)
    row.recovered_s = wait(lambda: run.trained_after(u), "update of the first run", t0)


def stop_collector(run: Run, row: Row) -> None:
    """SIGSTOP a collector process: the learner must stop, naming it, within its deadline; launch.py restarts it."""
    before, pid, t0 = run.last(), run.info("endpoints.json")["collectors"][1]["pid"], time.monotonic()
    old = run.info("endpoints.json")["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        row.detected_s = wait(lambda: "showed no sign of life" in run.console(), "the stopped collector named", t0)
        wait(lambda: gone(old), "end of the learner", t0)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    row.note = f"learner ended {round(time.monotonic() - t0, 1)} s after the stop"
    restarted(run, row, before, t0, old)


def kill_collector(run: Run, row: Row) -> None:
    """kill -9 of a collector process: the learner must end, naming it; launch.py restarts it."""
    before, t0 = run.last(), time.monotonic()
    info = run.info("endpoints.json")
    old = info["pid"]
    kill(info["collectors"][1]["pid"], signal.SIGKILL)
    row.detected_s = wait(lambda: gone(old), "end of the learner", t0)
    restarted(run, row, before, t0, old)


def stop_learner(run: Run, row: Row) -> None:
    """SIGSTOP of the learner: its own watchdog cannot run; launch.py must kill it once its heartbeat is
    run.learner_silent_s old (one line) and restart it."""
    before, pid, t0 = run.last(), run.info("endpoints.json")["pid"], time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    row.detected_s = wait(lambda: "gave no sign of life" in run.console(), "the silent learner named", t0,
                          timeout=LEARNER_SILENT_S + DEADLINE_S)
    restarted(run, row, before, t0, pid)


def _updates_in_console(run: Run) -> int:
    lines = [line for line in run.console().splitlines() if " INFO update " in line]
    return int(lines[-1].split(" INFO update ")[1].split()[0]) if lines else 0


def _checkpoint_failed(run: Run) -> bool:
    text = run.console().lower()
    return any(("checkpoint" in line or "torch.save" in line or "serialization" in line) and
               ("space" in line or "errno 28" in line) for line in text.splitlines())


def disk_full(run: Run, row: Row) -> None:
    """Fill the run directory's tmpfs and keep it full until a checkpoint was due (or the run ended); free it;
    the run must go on, or launch.py restart its learner from an intact checkpoint once there is space."""
    before, t0, old = run.last(), time.monotonic(), run.info("endpoints.json")["pid"]
    due = (_updates_in_console(run) // 5 + 2) * 5  # past the next multiple of run.checkpoint_every
    filler = run.run_dir.parent / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 20, 4096, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError:  # ENOSPC: on to a smaller chunk
                pass
    finally:
        os.close(fd)
    try:
        wait(lambda: gone(old) or _checkpoint_failed(run) or _updates_in_console(run) >= due, "checkpoint due", t0)
        row.detected_s = round(time.monotonic() - t0, 1)
        said = _checkpoint_failed(run) or gone(old)
    finally:
        filler.unlink()
    if not said:
        row.note = "a checkpoint was due on the full disk and nothing said it failed"
    if not gone(old):
        after = run.last()["update"]
        row.recovered_s = wait(lambda: run.trained_after(after), "update after", t0)
    else:
        row.note = "the learner stopped; launch.py restarted it once there was space"
        restarted(run, row, before, t0, old)


def kill_learner(run: Run, row: Row) -> None:
    before, pid, t0 = run.last(), run.info("endpoints.json")["pid"], time.monotonic()
    kill(pid, signal.SIGKILL)
    row.detected_s = wait(lambda: "was killed by SIGKILL" in run.console(), "the restart line", t0)
    restarted(run, row, before, t0, pid)


def huge_reward(run: Run, row: Row) -> None:
    """Issue 60: a client that plays by the rules with one env but reports rewards of 3.3e38 (finite in float32;
    they overflowed GAE and ended the run). It must be refused naming the bound, and the run train on."""
    import numpy as np
    from protocol import messages as m
    with _welcomed(run, 1, "huge") as (sock, u, t0):
        sock.send_multipart(m.encode(m.StepReport(0, np.zeros((1, 4), np.float32), np.zeros(1, np.float32),
                                                  np.zeros(1, bool), np.zeros(1, bool), first=True)))
        while isinstance(answer := _answer(sock), m.Actions):
            sock.send_multipart(m.encode(m.StepReport(0, np.zeros((1, 4), np.float32), np.full(1, 3.3e38, np.float32),
                                                      np.zeros(1, bool), np.zeros(1, bool))))
        if not isinstance(answer, m.Error) or "cluster.max_abs_reward" not in answer.reason:
            raise Failed(f"rewards of 3.3e38 answered {answer!r:.120}")
        row.detected_s, row.note = round(time.monotonic() - t0, 1), "refused: cluster.max_abs_reward"
        row.recovered_s = wait(lambda: run.trained_after(u), "update after the refusal", t0)


def stop_learner_at_start(run: Run, row: Row) -> None:
    """Issue 60: a learner SIGSTOPped as soon as it starts (before its first heartbeat) hung launch.py for ever.
    Here the learner is killed (-9), and its replacement stopped as soon as processes.json names it: launch.py
    must kill that one past run.learner_silent_s, counted from its spawn, and restart it again."""
    before, old, t0 = run.last(), run.info("endpoints.json")["pid"], time.monotonic()
    kill(old, signal.SIGKILL)
    wait(lambda: run.info("processes.json").get("learner") not in (None, old) or not run.live(), "a new learner", t0,
         timeout=120)
    new = run.info("processes.json").get("learner")
    if new not in (None, old):
        os.kill(new, signal.SIGSTOP)
    row.detected_s = wait(lambda: "gave no sign of life" in run.console(), "the stopped learner named", t0,
                          timeout=LEARNER_SILENT_S + DEADLINE_S)
    restarted(run, row, before, t0, new)


def hang_up(run: Run, row: Row) -> None:
    """Issue 60: SIGHUP to every process of the run, as a closed terminal sends it (it killed them all at once,
    exit 129, no final checkpoint). The run must end as on SIGTERM: a final checkpoint of its last update, exit
    0; ready() then resumes it."""
    t0 = time.monotonic()
    os.killpg(run.proc.pid, signal.SIGHUP)
    row.detected_s = wait(lambda: not run.live(), "the end of the run", t0)
    last, kept = run.last()["update"], newest_checkpoint(run.run_dir)
    row.updates_lost = max(0, last - kept)
    if run.proc.returncode != 0 or kept != last:
        raise Failed(f"the hang-up ended the run with exit {run.proc.returncode}, checkpoint {kept} of update {last}")
    row.note = "exit 0, final checkpoint; resumed"
    ready(run)
    row.recovered_s = round(time.monotonic() - t0, 1)


FAULTS = {"kill-actor": kill_actor, "stop-actor": stop_actor, "ghost": ghost, "greedy": greedy, "flood": flood,
          "out-of-turn": out_of_turn, "second-run": second_run, "stop-collector": stop_collector,
          "disk-full": disk_full, "kill-learner": kill_learner, "kill-collector": kill_collector,
          "stop-learner": stop_learner, "huge-reward": huge_reward, "stop-learner-at-start": stop_learner_at_start,
          "hang-up": hang_up, "handshake-flood": handshake_flood, "silent-rejoin": silent_rejoin, "big-flood": big_flood}
ENDS_THE_RUN = {"hang-up"}  # by design: a run that must reach its budget by itself (the soak) leaves them out


# ----------------------------------------------------------------------------------------------- main

def mount_tmpfs(path: Path, size_mb: int = 64) -> str | None:
    """A tmpfs of size_mb at path (None), or why not."""
    if os.geteuid() != 0:
        return "skipped: not root (a tmpfs to fill needs root)"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], capture_output=True,
                          text=True)
    return None if done.returncode == 0 else f"skipped: cannot mount a tmpfs ({done.stderr.strip()[:80]})"


def fmt(x) -> str:
    return "-" if x is None else str(x)


def print_row(row: Row) -> None:
    cells = [row.fault, fmt(row.detected_s), fmt(row.recovered_s), row.updates_lost, row.episodes_lost,
             row.memory_peak_mb, "yes" if row.survived else ("skipped" if row.note.startswith("skipped") else "NO"),
             row.note]
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def run_fault(run: Run, name: str, row: Row, settle=None) -> bool:
    """Inject one fault; True when a checkpoint was lost meanwhile. settle(run), before and after: the run trains
    with every env slot (default ready(): started again if a fault ended it)."""
    settle = settle or ready
    settle(run)
    kept = newest_checkpoint(run.run_dir)
    run.take_peak()
    try:
        FAULTS[name](run, row)
        settle(run)
        row.survived = True
    except Failed as exc:
        row.note = f"{row.note}; {exc}".strip("; ")
    row.memory_peak_mb = run.take_peak()
    lost = newest_checkpoint(run.run_dir) < kept
    row.survived = row.survived and not lost
    return lost


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", default=",".join(FAULTS), help="comma-separated, in order (default: all)")
    args = p.parse_args(argv)
    names = [f for f in args.faults.split(",") if f]
    if unknown := [f for f in names if f not in FAULTS]:
        p.error(f"unknown faults {unknown}; known: {', '.join(FAULTS)}")
    base = Path(tempfile.mkdtemp(prefix="chaos-"))
    (base / "fs").mkdir()
    no_tmpfs = mount_tmpfs(base / "fs")
    run, rows, lost = Run(base / "fs" / "run", base), [], 0
    started = time.monotonic()
    print(f"chaos: CartPole, 2 actors x 4 envs, 2 collectors, in {base}\n")
    print("| fault | detected after s | recovered after s | updates lost | episodes lost | memory peak MB | survived | note |")
    print("|---|---:|---:|---:|---:|---:|---|---|", flush=True)
    try:
        for name in names:
            row = Row(name)
            if name == "disk-full" and no_tmpfs:
                row.note = no_tmpfs
            else:
                lost += run_fault(run, name, row)
            rows.append(row)
            print_row(row)
    finally:
        run.stop()
        if run.run_dir.exists():  # its logs, kept beside the consoles (the tmpfs goes)
            shutil.copytree(run.run_dir, base / "run", ignore=shutil.ignore_patterns("tb", "*.pt"))
        if not no_tmpfs:
            subprocess.run(["umount", "-l", str(base / "fs")], check=False)
    ran = [r for r in rows if not r.note.startswith("skipped")]
    survived = sum(r.survived for r in ran)
    skipped = f" ({len(rows) - len(ran)} skipped)" if len(ran) < len(rows) else ""
    print(f"\n{time.monotonic() - started:.0f} s in all; logs in {base}")
    print(f"{survived} of {len(ran)} faults survived, {lost} checkpoints lost{skipped}")
    return 0 if survived == len(ran) and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
