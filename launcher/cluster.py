"""The supervisor: starts this host's learner ranks, then the actors and the evaluator; restarts an actor that died
(with a back-off, bounded), a learner that ended abnormally (restarts.py), and stops everything in order."""
from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import signal
import socket
import time
from multiprocessing.connection import wait
from pathlib import Path

from actor import EXIT_REFUSED
from launcher.children import actor_process, eval_process, learner_process
from launcher.heartbeats import kill_silent
from launcher.job import external_job
from launcher.restarts import ActorRestarts, LearnerRestarts
from launcher.stops import StopRequests
from learner.config import Config
from protocol.files import WriteFailed, atomic_write

log = logging.getLogger("launch")
ENDPOINT_TIMEOUT_S = 120.0
ACTOR_GRACE_S = 10.0  # at the end of a run: the actors' time to leave on the learner's goodbye
ACTOR_GRACE_STOPPING_S = 2.0  # the same after Ctrl-C or SIGTERM (an actor still starting has no goodbye to hear)
LEARNER_GRACE_S = 30.0  # the other ranks' time to stop after one learner rank ended


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool, groups: int | str, max_restarts: int, stops: StopRequests,
                 learner_restarts: LearnerRestarts):
        self.cfg, self.run_dir, self.resume, self.groups = cfg, run_dir, resume, groups
        self.stops, self.learner_restarts = stops, learner_restarts
        self.actor_restarts = ActorRestarts(max_restarts)  # --max-restarts per actor slot within an hour
        self.ctx = mp.get_context("spawn")
        self.learners: list[mp.Process] = []  # this host's learner ranks
        self.heartbeats: list = []  # each one's last beat, time.monotonic() (its spawn before): learner/lifecycle/process.py
        self.ranks = self._rank_envs()  # the environment of each (empty: one learner on its own)
        self.actors: dict[int, mp.Process] = {}
        self.evaluator = None  # the eval worker process, when cfg.eval.every > 0
        self.backoff_until: dict[int, float] = {}  # actor slots waiting for their restart, and until when
        self.given_up: set[int] = set()  # actor slots not restarted again (refused, or past their restart limit)
        self.left: set[int] = set()  # actor slots whose actor left on a goodbye
        self.refusals = self.ctx.SimpleQueue()  # (actor name, reason) from actors the learner refused
        self.refused: dict[str, str] = {}
        self.learners_told = False  # the learners were sent SIGTERM after a stop request
        self.addresses: list[str] = []  # each local learner rank's address; actor i joins rank i % len

    @property
    def learner(self) -> mp.Process:
        return self.learners[0]

    def _rank_envs(self) -> list[dict]:
        """One environment per local learner: --learners G makes a G-rank job on this host; under torchrun or
        srun this worker is one rank of theirs (its environment is inherited as it is)."""
        job, g = external_job(), self.cfg.cluster.learners
        if job is not None:
            return [{"RANK": str(job["rank"])}]
        if g == 1:
            return [{}]
        port = str(free_port())
        return [{"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(g), "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": port} for r in range(g)]

    def _endpoint_file(self, env: dict) -> Path:
        rank = int(env.get("RANK", "0"))
        return self.run_dir / (f"endpoints-rank-{rank}.json" if rank else "endpoints.json")

    def start(self) -> None:
        """The learners, then (once every one has written its endpoints) the actors and the evaluator. Returns
        early on a stop request or a learner that ended: supervise() then winds down whatever runs, or restarts
        the learners and then starts the rest (_start_the_rest)."""
        if self._start_learners():
            self._start_the_rest()

    def _start_the_rest(self) -> None:
        """Each actor slot without a process (never started, or left on the learner's goodbye: collector processes
        say goodbye to their actors when the learner dies, and ours are started again for the restarted learner,
        not counted as restarts; the others rejoin by themselves), except those given up; the evaluator if it is
        not running yet."""
        for i in range(self.cfg.cluster.actors):
            if self.stops():
                return
            proc = self.actors.get(i)
            if i not in self.given_up and (proc is None or proc.exitcode == 0):
                self._start_actor(i)
        self.left.clear()
        if self.cfg.eval.every > 0 and self.evaluator is None and not self.stops():
            self.evaluator = self.ctx.Process(target=eval_process, name="evaluator", daemon=False,
                                              args=(self.cfg.to_dict(), str(self.run_dir), os.getpid()))
            self.stops.started(self.evaluator)
            self._record_pids()

    def _start_learners(self) -> bool:
        """Every local learner rank, then their addresses once written; False if a stop or an end came first."""
        self.learners, self.addresses, self.heartbeats = [], [], []
        for env in self.ranks:
            self._endpoint_file(env).unlink(missing_ok=True)
            heartbeat = self.ctx.RawValue("d", time.monotonic())  # counted from its spawn: a learner stopped
            proc = self.ctx.Process(target=learner_process, name=f"learner-{env.get('RANK', '0')}",  # before its
                                    args=(self.cfg.to_dict(), str(self.run_dir), self.resume, env, os.getpid(), heartbeat))
            self.stops.started(proc)  # first beat is killed like one stopped later (kill_silent)
            self.learners.append(proc)
            self.heartbeats.append(heartbeat)
        self._record_pids()
        for env, proc in zip(self.ranks, self.learners):
            address = self._await_endpoint(env, proc)
            if address is None:
                return False
            self.addresses.append(address)
        self.learner_restarts.started()
        self._record_pids()
        return True

    def _restart_learners(self) -> bool:
        """A learner rank ended abnormally: the others are stopped, and (if the policy allows, after its waits)
        every rank starts again from the newest checkpoint, as --resume does. Our actors keep rejoining
        meanwhile (the new endpoints file tells them where). False: not restarted."""
        first = next(p for p in self.learners if not p.is_alive())
        verdict = None if first.exitcode == 0 else self.learner_restarts.decide(first.name, first.exitcode)
        if verdict is None:
            return False
        self._stop_learners()
        for env in self.ranks:  # no actor rejoins the dead address meanwhile
            self._endpoint_file(env).unlink(missing_ok=True)
        if not self.learner_restarts.wait(verdict):
            return False
        self.resume, self.ranks = True, self._rank_envs()  # a fresh MASTER_PORT for a multi-rank job
        if self._start_learners():
            self._start_the_rest()
        return True

    def _record_pids(self) -> None:
        """RUN_DIR/processes.json: who is running, for users (and tests) looking for stragglers."""
        info = {"launch": os.getpid(), "learner": self.learner.pid, "learners": [p.pid for p in self.learners],
                "actors": {str(i): p.pid for i, p in self.actors.items()}}
        if self.evaluator is not None:
            info["evaluator"] = self.evaluator.pid
        rank = int(self.ranks[0].get("RANK", "0")) if external_job() else 0
        name = f"processes-rank-{rank}.json" if rank else "processes.json"
        try:
            atomic_write(self.run_dir / name, json.dumps(info))
        except WriteFailed as exc:  # a full or read-only disk: the learner says so and stops; nothing to add
            log.warning("%s not updated (%s)", name, exc)

    def _await_endpoint(self, env: dict, learner: mp.Process) -> str | None:
        """The learner's address once it has bound it; None when a stop was asked for or a learner ended
        first (supervise() says how it ended, and the restart policy decides). A learner silent past
        run.learner_silent_s from its spawn (stopped before its first beat), or not up within
        ENDPOINT_TIMEOUT_S, is killed here, one line naming it: it has ended then."""
        path, deadline = self._endpoint_file(env), time.monotonic() + ENDPOINT_TIMEOUT_S
        while all(p.is_alive() for p in self.learners) and not self.stops():
            if path.exists():
                return json.loads(path.read_text())["address"]
            kill_silent(self.learners, self.heartbeats, self.cfg.run.learner_silent_s)
            if time.monotonic() > deadline:
                log.error("the learner (%s) did not come up within %gs; killing it", learner.name, ENDPOINT_TIMEOUT_S)
                learner.kill()
                learner.join(5.0)
            wait([learner.sentinel], timeout=0.1)
        return None

    def _start_actor(self, i: int) -> None:
        rank = i % len(self.addresses)
        proc = self.ctx.Process(target=actor_process, name=f"actor-{i}", daemon=False, args=(
            self.addresses[rank], str(self._endpoint_file(self.ranks[rank])), self.cfg.cluster.envs_per_actor, self.groups, f"actor-{i}", os.getpid(),
            str(self.run_dir / "actors.log"), self._actor_keys(), self.refusals))
        self.stops.started(proc)
        self.actors[i] = proc
        self._record_pids()

    def _actor_keys(self) -> tuple[str, str] | None:
        """Our own actors' CURVE keys: their secret key, and the learner's public key (read from its cert)."""
        c = self.cfg.cluster
        return (c.client_key, c.server_key) if c.client_key else None

    def supervise(self) -> int:
        while True:
            if self.stops() and not self.learners_told:
                for learner in self.learners:  # SIGTERM: rank 0 checkpoints, every rank says goodbye to its actors
                    if learner.is_alive():
                        learner.terminate()
                self.learners_told = True
            wait([*[p.sentinel for p in self.learners], *[p.sentinel for p in self.actors.values()]], timeout=0.5)
            kill_silent(self.learners, self.heartbeats, self.cfg.run.learner_silent_s)
            if not all(p.is_alive() for p in self.learners):
                if not self._restart_learners():
                    return self._shutdown()
                continue
            for i, proc in list(self.actors.items()):
                if not (proc.is_alive() or self.stops()):
                    self._tend_actor(i, proc)

    def _tend_actor(self, i: int, proc: mp.Process) -> None:
        """An actor process that ended: left on a goodbye, refused (given up), or restarted after its back-off
        while its slot is within its restart limit (ActorRestarts), else given up, one line each. With none of
        ours left, the learner's cluster.no_actors_timeout_s ends the run."""
        if proc.exitcode == 0:  # it left on the learner's goodbye: nothing to restart (but see _restart_learners)
            del self.actors[i]
            self.left.add(i)
        elif proc.exitcode == EXIT_REFUSED:  # a restart would be refused again
            log.error("actor-%d was refused: %s; not restarting it", i, self._refusal(f"actor-{i}"))
            self._give_up(i)
        elif i not in self.backoff_until:
            log.warning("actor-%d exited with code %s", i, proc.exitcode)
            delay = self.actor_restarts.delay(i)
            if delay is None:
                log.error("actor-%d: restart limit reached (%d within an hour, --max-restarts); training continues "
                          "without it", i, self.actor_restarts.limit)
                self._give_up(i)
            else:
                self.backoff_until[i] = time.monotonic() + delay
        elif time.monotonic() >= self.backoff_until[i]:
            del self.backoff_until[i]
            n = self.actor_restarts.restarted(i)
            log.warning("restarting actor-%d (restart %d of %d within an hour)", i, n, self.actor_restarts.limit)
            self._start_actor(i)

    def _give_up(self, i: int) -> None:
        del self.actors[i]
        self.given_up.add(i)
        if not self.actors:
            log.error("none of this run's actors is left: the learner ends the run past cluster.no_actors_timeout_s "
                      "without one (unless another joins)")

    def _refusal(self, name: str) -> str:
        """The reason the actor gave before exiting (it put it on the queue before it exited)."""
        while not self.refusals.empty():
            who, reason = self.refusals.get()
            self.refused[who] = reason
        return self.refused.pop(name, "reason in actors.log")

    def _stop_learners(self) -> list[int]:
        """Once one learner rank has ended, the others follow: SIGTERM, then SIGKILL past a grace period (a
        rank blocked in a collective with a dead peer only notices at its collective timeout)."""
        first = next(p for p in self.learners if not p.is_alive())
        alive = [p for p in self.learners if p.is_alive()]
        if alive and first.exitcode != 0:
            log.error("learner %s exited with code %s; stopping the other learner ranks", first.name, first.exitcode)
            for proc in alive:
                proc.terminate()
        deadline = time.monotonic() + LEARNER_GRACE_S  # after a clean end the others are finishing too
        for proc in alive:
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                log.error("learner %s did not stop within %gs; killing it", proc.name, LEARNER_GRACE_S)
                proc.kill()
                proc.join()
        return [p.exitcode for p in self.learners]

    def _stop_actors(self, failed: bool) -> None:
        """Actors leave on the learner's goodbye. After a stop request one still starting (no goodbye to hear)
        is not waited for long; after a learner that failed (no goodbye comes, or only from some of its
        collectors) none is waited for: SIGTERM at once (each leaves as on Ctrl-C), SIGKILL past the grace."""
        if not failed:
            deadline = time.monotonic() + (ACTOR_GRACE_STOPPING_S if self.stops() else ACTOR_GRACE_S)
            for proc in self.actors.values():
                proc.join(max(deadline - time.monotonic(), 0.1))
        for proc in self.actors.values():
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + ACTOR_GRACE_STOPPING_S
        for proc in self.actors.values():
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                proc.kill()
                proc.join()

    def _shutdown(self) -> int:
        codes = self._stop_learners()
        if self.stops():  # a learner SIGTERMed before its handler was in place (still starting) stopped as asked
            codes = [0 if c == -signal.SIGTERM else c for c in codes]
        failed = [c for c in codes if c != 0]
        code = 0 if not failed else 2 if codes[0] == 2 else failed[0]
        if code == 2 and self.learner_restarts.used:  # a restarted learner refused: the directory holds a run
            code = 1
        if self.evaluator is not None:
            self.evaluator.terminate()
        if code not in (0, 2):
            log.error("the learner exited with code %s; stopping the actors", code)
        self._stop_actors(failed=code not in (0, 2))
        if self.evaluator is not None:  # SIGTERMed on entry: mid-evaluation perhaps, it drops a half-written video
            self.evaluator.join(ACTOR_GRACE_STOPPING_S)
            if self.evaluator.is_alive():
                self.evaluator.kill()
                self.evaluator.join()
        return code if code in (0, 2) else 1  # 2: the learner refused to start (its log line says why)
