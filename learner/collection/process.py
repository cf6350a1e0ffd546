"""One collector process of K (`cluster.collectors`): its own socket and share of the actors, receiving,
validating, stacking and batched inference on the learner's device, its columns of each rollout in shared
memory. The training process (learner/collection/pool.py) drives it over a pipe:

    ("know", collector_addresses, rank_addresses)   collector 0 only: where it may redirect joiners
    ("collect", version, rank_slots)                 load weights `version`, fill one rollout, answer a Shard
    ("rows", rows_id, offset, arrays or None, alive)  where that rollout's columns go (arrays: the first time;
                                                     alive: the ids of the arrays the pool still has)
    ("close",)                                       goodbyes to the actors, exit

and it answers ("ready", endpoint) once bound, ("width", columns) when a rollout starts, ("shard", Shard)
when it is complete, ("stopped",) when told to stop mid-rollout, or ("error", text) before exiting 1. Between rollouts it keeps pumping its socket (joiners,
goodbyes, liveness) and posts on the shared board how many env slots it has ready and live.
"""
from __future__ import annotations

import logging
import os
import signal
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import zmq

from learner.config import Config
from learner.stalls import Stalled, Watchdog
from learner.gateway.gateway import Gateway
from learner.gateway.registry import ActorRegistry
from learner.collection.collector import Collector
from learner.collection.inference import Inference
from learner.collection.shard import Shard
from learner.update.ranks import RankBalancer, joiner_rank
from learner.model.networks import build_model
from learner.model.normalize import ValueNormalizer
from learner.report.metrics import exit_process, log_name, setup_logging

log = logging.getLogger("learner")
READY, SLOTS, ADMITTED, BEAT = 0, 1, 2, 3  # the board's columns: env slots ready for the next rollout, live
BOARD_COLUMNS = 4  # env slots, env slots ever handed out (joins so far, counted in envs), and the last sign of
                   # life (CLOCK_MONOTONIC in ms, system-wide: the training process compares it with its own)
IDLE_PUMP_MS = 50


class StopCollecting(Exception):
    """Told to stop while waiting to hear where a rollout's columns go."""


@dataclass
class CollectorSpec:
    """Everything a collector process builds itself from (picklable: it crosses a spawn)."""
    index: int
    count: int
    cfg: Config
    run_dir: str
    rank: int
    address: str          # where to bind (port 0: any free one)
    run_seed: int         # its env seeds' base: distinct per collector and rank
    generation: int       # the update the run (re)started from
    run_id: str
    actor_env: object     # EnvSettings the actors run
    actor_obs_space: object
    obs_space: object
    action_space: object
    layout: tuple         # the rollout's (obs shape, obs dtype, action shape, action dtype)
    frame_stack: int
    device: str
    policy_seed: int
    parent_pid: int
    shared_rows: bool = True   # write into the training process's rollout (False in collect-only runs: nobody
    flow_through: bool = False  # trains on it, so each collector keeps its rows and flows through rollouts)
    rank_targets: tuple | None = None  # (targets, loads) on rank 0 of several ranks, collector 0: RankBalancer
    admission: object = None  # this collector's share of what peers may claim (learner.gateway.admission)


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
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the training process, which stops us in order
    torch.set_num_threads(1)
    setup_logging(Path(spec.run_dir), spec.rank, tag=f"collector {spec.index}")
    try:
        code = CollectorProcess(spec, conn, weights, board.numpy(), halt.numpy()).serve()
    except Stalled as exc:
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
        conn.send(("error", text))
    except (OSError, ValueError):
        pass  # the training process is gone: nobody to tell
    return 1


class CollectorProcess:
    def __init__(self, spec: CollectorSpec, conn, weights, board: np.ndarray, halt: np.ndarray):
        self.spec, self.conn, self.weights, self.board, self.halt = spec, conn, weights, board, halt
        cfg, device = spec.cfg, torch.device(spec.device)
        self.model = build_model(spec.obs_space, spec.action_space, cfg.model).to(device)
        self.value_norm = ValueNormalizer().to(device) if cfg.normalize.value else None
        self.version = weights.load_into([self.model, self.value_norm])
        self.registry = ActorRegistry(admission=spec.admission)
        self.ctx = zmq.Context()
        self.curve = self._curve()
        self.balancer = CollectorBalancer(self.registry.num_slots, board) if spec.index == 0 else None
        self.rank_balancer = self._rank_balancer()
        self.gateway = Gateway(self.ctx, spec.address, spec.actor_env, spec.actor_obs_space, spec.action_space,
                               spec.run_seed, spec.generation, spec.run_id, cfg.cluster.max_message_mb << 20,
                               curve=self.curve, registry=self.registry,
                               redirect=redirect_chain(self.rank_balancer, self.balancer) if spec.index == 0 else None,
                               wake=conn.fileno(),  # a command ends the idle pump's wait at once
                               codec=cfg.cluster.codec)
        policy = Inference(self.model, spec.action_space, device, None, seed=spec.policy_seed,
                           random_actions=cfg.run.random_policy, value_norm=self.value_norm)
        self.watchdog = BeatingWatchdog(Path(spec.run_dir) / log_name(spec.rank),
                                        max(cfg.run.watchdog_s, 2 * cfg.cluster.collective_timeout_s), board, spec.index)
        c = cfg.cluster
        self.rows: dict[int, dict] = {}  # the training process's shared rollout arrays, by id (the last two)
        self.collector = Collector(self.gateway, self.registry, policy, cfg.ppo.num_steps, *spec.layout, device,
                                   c.actor_timeout_s, frame_stack=spec.frame_stack,
                                   startup_timeout_s=0.0,  # the pool's wait for the first rollout has the deadline
                                   watchdog=self.watchdog, link=policy.link, flow_through=spec.flow_through,
                                   rows_for=self._rows_for if spec.shared_rows else None)
        self.posted = None  # the registry's (actors joined so far, connected) when the board last heard

    def _curve(self):
        c = self.spec.cfg.cluster
        if not c.server_key:
            return None
        from protocol.security import ServerKeys
        curve = ServerKeys.load(c.server_key, c.allowed_keys)
        curve.start_authenticator(self.ctx)
        return curve

    def _rank_balancer(self) -> RankBalancer | None:
        if self.spec.index != 0 or self.spec.rank_targets is None:
            return None
        targets, loads = self.spec.rank_targets
        return RankBalancer(lambda: int(self.board[:, SLOTS].sum()), targets, loads)

    def should_stop(self) -> bool:
        if os.getppid() != self.spec.parent_pid:  # the training process is gone (kill -9 included)
            log.error("the training process (pid %d) is gone: collector %d stops", self.spec.parent_pid,
                      self.spec.index)
            self.halt[0] = 1
        return bool(self.halt[0])

    def serve(self) -> int:
        try:
            self.conn.send(("ready", self.gateway.endpoint))
            while not self.should_stop():
                command = self._next_command()
                if command is None or command[0] == "close":
                    break
                if command[0] == "know":
                    self._know(*command[1:])
                elif not self._collect(*command[1:]):
                    self._tell(("stopped",))
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
        return self.conn.recv()

    def _post_slots(self) -> None:
        """Live and admitted env slots to the board, when a join or a leave changed them (not per message)."""
        mark = (self.registry.next_actor_id, len(self.registry))
        if mark != self.posted:
            self.posted = mark
            self.board[self.spec.index, ADMITTED] = sum(self.registry.slot_uses.values())
            self.board[self.spec.index, SLOTS] = self.registry.num_slots()

    def _know(self, collectors: list[str], ranks: list[str] | None) -> None:
        if self.balancer is not None:
            self.balancer.know(collectors)
        if self.rank_balancer is not None and ranks:
            self.rank_balancer.know(ranks)

    def _collect(self, version: int, rank_slots: list[int] | None) -> bool:
        if self.rank_balancer is not None and rank_slots is not None:
            self.rank_balancer.after_update(rank_slots)
        if version != self.version:
            self.version = self.weights.load_into([self.model, self.value_norm])
        self.board[self.spec.index, READY] = 0
        try:
            rollout = self.collector.collect(0, self.should_stop, version, admit_first=False)
        except StopCollecting:
            return False
        if rollout is None:
            return False
        self._post_slots()
        self.conn.send(("shard", Shard.of(
            self.spec.index, rollout, episodes=self.collector.episodes.take_new(), actors=len(self.registry),
            live_slots=self.registry.num_slots(), rejected=self.gateway.rejected,
            events=self.gateway.take_events())))
        return True

    def _rows_for(self, width: int) -> dict:
        """This rollout's columns of the training process's shared rollout: say how many, hear where."""
        self.conn.send(("width", width))
        while not self.conn.poll(0.1):
            if self.should_stop():
                raise StopCollecting()
        kind, rows_id, offset, arrays, alive = self.conn.recv()
        self.rows = {i: r for i, r in self.rows.items() if i in alive}  # the pool has let the others go
        if arrays is not None:
            self.rows[rows_id] = arrays
        return {name: t[:, offset:offset + width] for name, t in self.rows[rows_id].items()}

    def close(self) -> None:
        self.watchdog.stop()
        self.gateway.close()
        if self.curve is not None:
            self.curve.stop()
        self.ctx.term()
