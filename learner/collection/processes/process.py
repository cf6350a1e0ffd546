"""One collector process of K (`cluster.collectors`): its own socket and share of the actors, receiving,
validating, stacking and batched inference on the learner's device, its columns of each rollout in shared
memory (with run.segments filled until the K collectors' steps together make the job's quota: board.py's
JobQuota). The training process (learner/collection/processes/pool.py) drives it over a pipe, with the messages of
learner/collection/processes/pipe.py: it answers Ready once bound, Width when a rollout starts (and hears Rows: where its
columns go), Done with its Shard, Stopped when told to stop mid-rollout, or Failed before exiting 1. Between
rollouts it keeps pumping its socket (joiners, goodbyes, liveness) and posts on the shared board
(learner/collection/processes/board.py) how many env slots it has ready and live.
"""
from __future__ import annotations

import logging
import signal
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import zmq

from learner.collection.assembly import GatewaySetup, RunOnRank, Spaces, assemble
from learner.stalls import Stalled, Watchdog
from learner.gateway.registry import ActorRegistry
from learner.collection.inference import Inference
from learner.collection.processes.board import ADMITTED, BEAT, READY, SLOTS, JobQuota
from learner.collection.processes.pipe import (Close, Collect, Done, Failed, Know, Ready, Rows, Stopped, Strike, Width,
                                               PipeError, check)
from learner.collection.slot_owners import actors_of
from learner.collection.processes.shard import Shard
from learner.collection.ranks_quota import RanksQuota, RanksStore
from learner.gateway.placement import RankBalancer, joiner_rank
from learner.model.networks import build_model
from learner.model.normalize import ValueNormalizer
from learner.report.metrics import exit_process, log_name, setup_logging
from learner.rollout.layout import Layout
from learner.seeds import collector_env_base, collector_policy_seed
from protocol.processes import parent_alive
from protocol.security import ServerKeys

log = logging.getLogger("learner")
IDLE_PUMP_MS = 50
PARENT = "the training process"


class StopCollecting(Exception):
    """Told to stop while waiting to hear where a rollout's columns go."""


@dataclass(frozen=True)
class CollectorRole:
    """Which collector of the K this is, and what it alone is given."""
    index: int
    count: int
    address: str                    # where to bind (port 0: any free one)
    rank_targets: tuple | None = None  # (targets, loads) on rank 0 of several ranks, collector 0: RankBalancer
    admission: object = None        # its share of what peers may claim (learner.gateway.admission)
    ranks_store: RanksStore | None = None  # run.segments on several ranks: the job's store, its row there


@dataclass(frozen=True)
class CollectorSpec:
    """Everything a collector process builds itself from (picklable: it crosses a spawn)."""
    run: RunOnRank
    spaces: Spaces
    layout: Layout
    role: CollectorRole

    @property
    def index(self) -> int:
        return self.role.index

    @property
    def shared_rows(self) -> bool:
        """Write into the training process's rollout (not in collect-only runs: nobody trains on it, so each
        collector keeps its rows and flows through rollouts)."""
        return not self.run.cfg.run.collect_only


class ServedCopy:
    """This collector's copy of the served modules, loaded from the shared weights before a rollout of another
    version (`load`) and, with policy lag, as soon as newer ones are published mid-rollout (`newer`: the
    collector's NewerWeights; the pool publishes once the update running meanwhile is done)."""

    def __init__(self, weights, modules: list):
        self.weights, self.modules = weights, modules
        self.version = weights.load_into(modules)

    def load(self, version: int) -> None:
        if version != self.version:
            self.version = self.weights.load_into(self.modules)

    def newer(self, serving: int) -> int | None:
        if self.version > serving:  # loaded at the rollout's start, published after the pool's Collect was sent
            return self.version
        if self.weights.current() <= serving:  # (mid-publish it reads -1: not yet)
            return None
        self.version = self.weights.load_into(self.modules)
        return self.version


class BeatingWatchdog(Watchdog):
    """A collector process's watchdog whose every pet also writes the process's heartbeat on the board, so the
    training process tells a collector that is stopped (SIGSTOP) or hung from one whose rollout is slow."""

    def __init__(self, log_path: Path, timeout_s: float, board: np.ndarray, index: int):
        super().__init__(log_path, timeout_s)
        self.board, self.index = board, index
        self.beat()

    def beat(self) -> None:
        self.board[self.index, BEAT] = int(time.monotonic() * 1000)

    def pet(self, budget_s: float | None = None) -> None:
        super().pet(budget_s)
        self.beat()


class CollectorBalancer:
    """Collector 0's choice for a joiner: the collector with the fewest env slots (collector 0 on ties), None
    to keep it. Another collector's load is its live slots on the board plus the envs sent to it that it has
    not admitted yet (still on their way: sent so far minus admitted so far)."""

    def __init__(self, own_slots, board: np.ndarray):
        self.own_slots, self.board, self.addresses = own_slots, board, []
        self.sent = [0] * len(board)

    def know(self, addresses: list[str]) -> None:
        self.addresses = list(addresses)

    def loads(self) -> list[int]:
        on_the_way = [max(0, sent - int(admitted)) for sent, admitted in zip(self.sent, self.board[:, ADMITTED])]
        return [self.own_slots()] + [int(self.board[k, SLOTS]) + on_the_way[k] for k in range(1, len(self.board))]

    def __call__(self, num_envs: int) -> str | None:
        if len(self.addresses) < 2:
            return None
        best = joiner_rank(self.loads(), [0] * len(self.board))
        if best == 0:
            return None
        self.sent[best] += num_envs
        return self.addresses[best]


def redirect_chain(*choices):
    """The first choice that sends the joiner elsewhere (the rank, then the collector), None to keep it."""
    choices = [c for c in choices if c is not None]

    def choose(num_envs: int) -> str | None:
        for choice in choices:
            if (target := choice(num_envs)) is not None:
                return target
        return None
    return choose


def collector_main(spec: CollectorSpec, conn, weights, board: torch.Tensor, halt: torch.Tensor) -> None:
    """The process's entry point (spawned by the pool)."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # Ctrl-C, a closed terminal: the training process stops us in order
        signal.signal(sig, signal.SIG_IGN)
    torch.set_num_threads(1)
    setup_logging(Path(spec.run.run_dir), spec.run.rank, tag=f"collector {spec.index}")
    try:
        code = CollectorProcess(spec, conn, weights, board.numpy(), halt.numpy()).serve()
    except (Stalled, PipeError) as exc:
        code = _fail(conn, str(exc))
    except EOFError:  # the pipe closed: the training process is gone (kill -9 included); nobody to serve
        log.warning("collector %d: the training process is gone; stopping", spec.index)
        code = 1
    except (zmq.ZMQError, OSError) as exc:  # an address in use, a key file: the one line says it all
        code = _fail(conn, f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # one clear line to the training process, the traceback in the log
        log.error("collector %d failed:\n%s", spec.index, traceback.format_exc())
        code = _fail(conn, f"{type(exc).__name__}: {exc}")
    exit_process(code)


def _fail(conn, text: str) -> int:
    try:
        conn.send(Failed(text))
    except (OSError, ValueError):
        pass  # the training process is gone: nobody to tell
    return 1


class CollectorProcess:
    def __init__(self, spec: CollectorSpec, conn, weights, board: np.ndarray, halt: np.ndarray):
        self.spec, self.conn, self.weights, self.board, self.halt = spec, conn, weights, board, halt
        run, role, cfg, device = spec.run, spec.role, spec.run.cfg, torch.device(spec.run.device)
        self.model = build_model(spec.spaces.obs_space, spec.spaces.action_space, cfg.model).to(device)
        self.value_norm = ValueNormalizer().to(device) if cfg.normalize.value else None
        self.served = ServedCopy(weights, [self.model, self.value_norm])
        self.ctx = zmq.Context()
        self.curve = self._curve()
        self.rows: dict[int, dict] = {}  # the training process's shared rollout arrays, by id (the last two)
        policy = Inference(self.model, spec.spaces.action_space, device, None,
                           seed=collector_policy_seed(cfg.run.seed, run.generation, run.rank, role.index),
                           random_actions=cfg.run.random_policy, value_norm=self.value_norm)
        self.watchdog = BeatingWatchdog(Path(run.run_dir) / log_name(run.rank),
                                        max(cfg.run.watchdog_s, 2 * cfg.cluster.collective_timeout_s), board, role.index)
        self.balancer = self.rank_balancer = None
        gateway_setup = GatewaySetup(self.ctx, role.address, self.curve,
                                     collector_env_base(cfg.run.seed, run.rank, role.index), role.admission,
                                     redirect_for=self._redirect_for,
                                     wake=conn.fileno())  # a command ends the idle pump's wait at once
        quota = (RanksQuota(role.ranks_store) if role.ranks_store is not None  # the job's, over every rank's
                 else JobQuota(board, role.index, cfg.ppo.num_steps) if cfg.run.segments else None)  # collectors
        parts = assemble(run, spec.spaces, spec.layout, gateway_setup, policy, self.watchdog, policy.link,
                         in_process=False, rows_for=self._rows_for if spec.shared_rows else None, newer=self.served,
                         quota=quota)
        self.registry, self.gateway, self.collector = parts.registry, parts.gateway, parts.collector
        self.posted = None  # the registry's (actors joined so far, connected) when the board last heard

    def _redirect_for(self, registry: ActorRegistry):
        """Collector 0 sends joiners to another rank first, else to the collector with the fewest env slots."""
        if self.spec.index != 0:
            return None
        self.balancer = CollectorBalancer(registry.num_slots, self.board)
        self.rank_balancer = self._rank_balancer()
        return redirect_chain(self.rank_balancer, self.balancer)

    def _curve(self):
        c = self.spec.run.cfg.cluster
        if not c.server_key:
            return None
        curve = ServerKeys.load(c.server_key, c.allowed_keys)
        curve.start_authenticator(self.ctx)
        return curve

    def _rank_balancer(self) -> RankBalancer | None:
        if self.spec.role.rank_targets is None:
            return None
        targets, loads = self.spec.role.rank_targets
        return RankBalancer(lambda: int(self.board[:, SLOTS].sum()), targets, loads)

    def should_stop(self) -> bool:
        if not parent_alive(self.spec.run.parent_pid):  # the training process is gone (kill -9 included)
            log.error("the training process (pid %d) is gone: collector %d stops", self.spec.run.parent_pid,
                      self.spec.index)
            self.halt[0] = 1
        return bool(self.halt[0])

    def serve(self) -> int:
        try:
            self.conn.send(Ready(self.gateway.endpoint))
            while not self.should_stop():
                command = self._next_command()
                if command is None or isinstance(command, Close):
                    break
                if isinstance(command, Know):
                    self._know(command)
                elif isinstance(command, Strike):
                    for entry in actors_of(self.registry, command.slots):
                        self.gateway.strike(entry, command.reason)
                elif not self._collect(command):
                    self._tell(Stopped())
                    break
            return 0
        finally:
            self.close()

    def _tell(self, message) -> None:
        try:
            self.conn.send(message)
        except (OSError, ValueError):
            pass  # the training process is gone: should_stop() says so, and we are on our way out

    def _next_command(self):
        """Pump the socket until the training process says what to do next (None: told to stop)."""
        while not self.conn.poll(0):
            if self.should_stop():
                return None
            self.board[self.spec.index, READY] = self.collector.pump(IDLE_PUMP_MS)
            self._post_slots()
        return check(self.conn.recv(), (Know, Collect, Strike, Close), PARENT)

    def _post_slots(self) -> None:
        """Live and admitted env slots to the board, when a join or a leave changed them (not per message)."""
        mark = (self.registry.next_actor_id, len(self.registry))
        if mark != self.posted:
            self.posted = mark
            self.board[self.spec.index, ADMITTED] = sum(self.registry.slot_uses.values())
            self.board[self.spec.index, SLOTS] = self.registry.num_slots()

    def _know(self, command: Know) -> None:
        if self.balancer is not None:
            self.balancer.know(command.collectors)
        if self.rank_balancer is not None and command.ranks:
            self.rank_balancer.know(command.ranks)

    def _collect(self, command: Collect) -> bool:
        if self.rank_balancer is not None and command.rank_slots is not None:
            self.rank_balancer.after_update(command.rank_slots)
        self.served.load(command.version)
        self.board[self.spec.index, READY] = 0
        try:
            rollout = self.collector.collect(0, self.should_stop, command.version, admit_first=False)
        except StopCollecting:
            return False
        if rollout is None:
            return False
        self._post_slots()
        self.conn.send(Done(Shard.of(
            self.spec.index, rollout, episodes=self.collector.episodes.take_new(), actors=len(self.registry),
            live_slots=self.registry.num_slots(), rejected=self.gateway.rejected,
            events=self.gateway.take_events()), self.collector.counts))
        return True

    def _rows_for(self, width: int) -> dict:
        """This rollout's columns of the training process's shared rollout: say how many, hear where."""
        self.conn.send(Width(width))
        while not self.conn.poll(0.1):
            if self.should_stop():
                raise StopCollecting()
        where = check(self.conn.recv(), (Rows,), PARENT)
        self.rows = {i: r for i, r in self.rows.items() if i in where.alive}  # the pool has let the others go
        if where.arrays is not None:
            self.rows[where.rows_id] = where.arrays
        return {name: t[:, where.offset:where.offset + width] for name, t in self.rows[where.rows_id].items()}

    def close(self) -> None:
        self.watchdog.stop()
        self.gateway.close()
        if self.curve is not None:
            self.curve.stop()
        self.ctx.term()
