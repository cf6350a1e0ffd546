"""The rules between config keys, and those that depend on this machine (learner/config.py declares each key's own
type, bounds and choices): validate() runs them once the model is built, the first broken raising ConfigError
naming the keys, the values and the rule. Also the checks made where a run starts (check_multi_rank,
check_collectors, check_resume) and the topology the cluster keys resolve to.

Torch-free, as learner/config.py; the models are only named here (annotations), never imported at run time.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from protocol import compression
from protocol.messages import MAX_ENV_SLOTS
from protocol.settings import POSITIONS, EnvSettings, task_name
from protocol.transport import LOCAL

if TYPE_CHECKING:
    from learner.config import ClusterConfig, Config, PPOConfig

MAX_ROLLOUT = 2**22  # samples (num_steps x env slots) in one rollout: 4M Atari samples are ~115 GB already


class ConfigError(ValueError):
    """A config file, override or value that cannot be used; the message names the key."""


def _require(ok: bool, message: str):
    if not ok:
        raise ConfigError(message)


def topology(c: ClusterConfig, cores: int | None = None) -> tuple[int, int]:
    """(actors, envs_per_actor), choosing what is left at -1 / 0. Both left: cluster.envs (the recipe's
    rollout width) over as many actors as there are cores, at most one per env and dividing the envs (2
    cores: 2 actors x 4 envs; 8 or more: 8 x 1). On 2 cores that full training measured as fast as 8 x 1 with
    a shorter start, and 2 groups did not pay (README, Throughput)."""
    actors, per = c.actors, c.envs_per_actor
    if actors >= 0 and per >= 1:
        return actors, per
    if actors < 0 and per < 1:
        cores = cores or os.cpu_count() or 1
        actors = max(d for d in range(1, min(cores, c.envs) + 1) if c.envs % d == 0)
        return actors, c.envs // actors
    if actors < 0:
        return max(1, -(-c.envs // per)), per
    return actors, max(1, -(-c.envs // actors)) if actors else 1


def lr_schedule(p: PPOConfig) -> str:
    """The schedule in force: ppo.anneal_lr = false (CleanRL's switch) turns the default linear into constant."""
    return "constant" if p.lr_schedule == "linear" and not p.anneal_lr else p.lr_schedule


def rate_horizon(cfg: Config) -> int:
    """The agent steps at which the linear rate reaches 0 (ppo.lr_anneal_steps, else run.total_steps): the
    schedules' progress is the run's env steps over it."""
    return cfg.ppo.lr_anneal_steps or cfg.run.total_steps


def check_multi_rank(cfg: Config, why: str) -> None:
    """What a G-rank learner does not support yet: say so before anything starts."""
    _require(not (cfg.normalize.obs or cfg.normalize.reward),
             f"normalize.obs / normalize.reward keep per-learner statistics and are not supported with {why}")


def check_collectors(cfg: Config) -> None:
    """cluster.collectors: one process where several would not be exact or would diverge."""
    k = cfg.cluster.collectors
    _require(k <= 1 or not cfg.run.deterministic, f"cluster.collectors = {k} is not exact across process "
             "scheduling: deterministic runs collect in one process (set cluster.collectors = 1)")
    _require(k <= 1 or not cfg.normalize.obs, f"cluster.collectors = {k} with normalize.obs: each collector "
             "would keep its own observation statistics (set cluster.collectors = 1)")


def _is_host(text: str) -> bool:
    """A host name, IPv4 or IPv6 address (bracketed or not), and not one meaning every interface."""
    import ipaddress
    import re
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return not ipaddress.ip_address(bare).is_unspecified
    except ValueError:
        return bare == text and len(text) <= 253 and re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", text) is not None


def validate(cfg: Config) -> None:
    """The rules between keys, and those that depend on this machine; each key's own type, bounds and choices
    are declared on its field and checked when the model is built. The first broken raises ConfigError naming
    the keys, the values and the rule."""
    _check_topology(cfg)
    _check_addresses(cfg.cluster)
    _check_codec(cfg.cluster)
    _check_rollout(cfg)
    _check_segments(cfg)
    _check_lr(cfg.ppo)
    _check_entropy(cfg.ppo)
    _check_core(cfg)
    _check_observe(cfg.env)


def _check_topology(cfg: Config) -> None:
    c = cfg.cluster
    _require(cfg.num_envs <= MAX_ENV_SLOTS, f"cluster.actors x cluster.envs_per_actor = {cfg.num_envs} env slots: "
             f"more than the learner's limit of {MAX_ENV_SLOTS}")
    _require(c.groups != "auto" or not cfg.run.deterministic, "cluster.groups = 'auto' chooses from measured "
             "timings and rejoins: deterministic runs need a number of groups (e.g. 1)")
    check_collectors(cfg)
    if c.learners > 1:
        check_multi_rank(cfg, f"cluster.learners = {c.learners}")


def _check_addresses(c: ClusterConfig) -> None:
    _require(c.address == LOCAL or c.address.startswith(("tcp://", "ipc://")),
             f"cluster.address must be '{LOCAL}' or start with tcp:// or ipc://, got {c.address!r}")
    _require(c.weights_address == LOCAL or c.weights_address.startswith(("tcp://", "ipc://")),
             f"cluster.weights_address must be '{LOCAL}' or start with tcp:// or ipc://, got {c.weights_address!r}")
    for key in ("address", "weights_address"):
        _check_port(f"cluster.{key}", getattr(c, key))
    _require(c.advertise_host == "" or _is_host(c.advertise_host),
             f"cluster.advertise_host must be a host name or an IP address other actors can reach (not a wildcard "
             f"such as 0.0.0.0), got {c.advertise_host!r}")
    _require(c.address != c.weights_address or c.address == LOCAL or c.address.endswith(":0"),
             "cluster.address and cluster.weights_address must differ")
    _require(bool(c.server_key) == bool(c.allowed_keys), "cluster.server_key and cluster.allowed_keys go together")
    _require(not c.client_key or bool(c.server_key), "cluster.client_key needs cluster.server_key")
    if not c.server_key:
        from protocol.security import is_loopback
        for key in ("address", "weights_address"):
            addr = getattr(c, key)
            _require(addr == LOCAL or is_loopback(addr), f"cluster.{key} {addr!r} is beyond loopback: binding "
                     "there requires CURVE keys (cluster.server_key, cluster.allowed_keys; see the README)")


def _check_port(key: str, address: str) -> None:
    """tcp://HOST:PORT with PORT in 0..65535 (0: a free one); ZeroMQ would wrap 99999 round to another port."""
    if not address.startswith("tcp://"):
        return
    host, sep, port = address[len("tcp://"):].rpartition(":")
    _require(bool(sep) and bool(host) and port.isdigit() and int(port) <= 65535,
             f"{key} must be tcp://HOST:PORT with PORT in [0, 65535] (0: a free one), got {address!r}")


def _check_codec(c: ClusterConfig) -> None:
    """cluster.codec: a compressor this machine has (the field's choices are every one the code knows)."""
    _require(c.codec in ("auto", "none", *compression.available()), f"cluster.codec must be auto, none or a codec "
             f"installed here ({', '.join(compression.available()) or 'none installed'}), got {c.codec!r}")


def _check_rollout(cfg: Config) -> None:
    """A rollout's samples within the limit, and at least one sample in each minibatch."""
    p = cfg.ppo
    width = max(cfg.num_envs, cfg.cluster.min_envs, 1)
    samples = p.num_steps * width
    _require(samples <= MAX_ROLLOUT, f"ppo.num_steps x env slots = {p.num_steps} x {width} = "
             f"{samples} samples per rollout: more than the limit of {MAX_ROLLOUT}")
    _require(p.num_minibatches <= samples, f"ppo.num_minibatches must be in [1, {samples}] (the samples of a "
             f"rollout, ppo.num_steps x env slots; more: a minibatch would hold less than one sample), "
             f"got {p.num_minibatches}")


def _check_segments(cfg: Config) -> None:
    """run.segments: none of what keeps a per-slot order across columns yet."""
    if not cfg.run.segments:
        return
    lacking = [f"{key} = {value}" for key, value, bad in (
        ("run.deterministic", cfg.run.deterministic, cfg.run.deterministic),
        ("normalize.reward", cfg.normalize.reward, cfg.normalize.reward),
        ("model.core", repr(cfg.model.core), cfg.model.core != "none")) if bad]
    _require(not lacking, f"run.segments is not supported with {', '.join(lacking)} yet: segments are cut "
             "feed-forward, without per-slot reward statistics (set run.segments = false, or those keys)")


def _check_core(cfg: Config) -> None:
    """A recurrent core: its sequences fit the rollout."""
    p, core = cfg.ppo, cfg.model.core
    if core == "none":
        return
    _require(p.bptt == 0 or p.num_steps % p.bptt == 0,
             f"ppo.bptt must divide ppo.num_steps (each env slot's rollout is cut into sequences of bptt steps), "
             f"got bptt {p.bptt} and num_steps {p.num_steps}")
    sequences = max(cfg.num_envs, cfg.cluster.min_envs, 1) * (p.num_steps // (p.bptt or p.num_steps))
    _require(p.num_minibatches <= sequences, f"ppo.num_minibatches must be in [1, {sequences}] with model.core = "
             f"{core!r} (minibatches are made of whole sequences: env slots x ppo.num_steps / ppo.bptt), "
             f"got {p.num_minibatches}")


def _check_observe(env: EnvSettings) -> None:
    """env.observe = "positions": a task whose positions the actors know (protocol.settings.POSITIONS)."""
    _require(env.observe == "all" or (not env.is_atari and task_name(env.env_id) in POSITIONS),
             f"env.observe = {env.observe!r} knows the positions of {', '.join(POSITIONS)} only, got env.env_id "
             f"{env.env_id!r} (set env.observe = \"all\")")


def _check_lr(p: PPOConfig) -> None:
    _require(p.lr_min <= p.lr_max, f"ppo.lr_min and ppo.lr_max must satisfy lr_min <= lr_max, "
             f"got {p.lr_min}, {p.lr_max}")
    _require(p.lr_schedule != "adaptive" or p.lr_min <= p.learning_rate <= p.lr_max,
             f"ppo.learning_rate {p.learning_rate} must lie in [ppo.lr_min, ppo.lr_max] = [{p.lr_min}, {p.lr_max}] "
             "with lr_schedule adaptive")
    _require(p.lr_anneal_steps == 0 or lr_schedule(p) == "linear",
             f"ppo.lr_anneal_steps {p.lr_anneal_steps} is the linear schedule's horizon; the schedule in force is "
             f"{lr_schedule(p)} (set ppo.lr_schedule = \"linear\", or leave lr_anneal_steps at 0)")


def _check_entropy(p: PPOConfig) -> None:
    _require(p.ent_anneal_steps == 0 or p.ent_schedule == "linear",
             f"ppo.ent_anneal_steps {p.ent_anneal_steps} is the linear entropy schedule's horizon; ppo.ent_schedule is "
             f"{p.ent_schedule} (set ppo.ent_schedule = \"linear\", or leave ent_anneal_steps at 0)")


RESUME_FIXED = ("env", "model", "normalize.obs", "normalize.reward", "normalize.value", "ppo.variant")


def check_resume(saved: Config, cfg: Config, what: str) -> None:
    """What a resume may not change: the env (its data), the network, the statistics it was trained with."""
    old, new = saved.to_dict(), cfg.to_dict()
    for name in RESUME_FIXED:
        section, _, key = name.partition(".")
        for k in ([key] if key else old[section]):
            _require(old[section][k] == new[section][k], f"{what}: {section}.{k} cannot change on resume (the "
                     f"run's is {old[section][k]!r}, asked {new[section][k]!r}); start a new run for that")
