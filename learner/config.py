"""The run configuration: TOML sections mapped onto dataclasses, overrides, validation.

Torch-free on purpose: launch.py validates a config (and exits 2 on a bad one) before any heavy import.
Every field's docstring is its documentation: `python launch.py --help-config` prints them, and
docs/configuration.md is generated from them (learner/config_docs.py).
"""
from __future__ import annotations

import ast
import dataclasses
import math
import os
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

from learner.gateway.admission import check_admission_config
from learner.gateway.registry import MAX_ENV_SLOTS
from protocol import compression
from protocol.settings import EnvSettings
from protocol.transport import LOCAL


LR_SCHEDULES = ("linear", "constant", "adaptive")
ACTIVATIONS = ("relu", "elu")


class ConfigError(ValueError):
    """A config file, override or value that cannot be used; the message names the key."""


@dataclass
class RunConfig:
    seed: int = 1
    """run seed; every env slot derives its own seed from it"""
    total_steps: int = 10_000_000
    """agent steps (summed over all envs) to train for"""
    device: str = "auto"
    """auto (cuda when available) | cpu | cuda"""
    deterministic: bool = False
    """same seed + config on CPU give the same metrics: lock-step collection, deterministic kernels"""
    torch_threads: int = 0
    """threads for the learner's torch ops (0: torch's default)"""
    checkpoint_every: int = 50
    """write a checkpoint every this many updates (and always at the end)"""
    collect_only: bool = False
    """run actors and inference without gradient updates (throughput measurement)"""
    random_policy: bool = False
    """answer actors with uniform random actions instead of running the network"""
    policy_lag: int = 0
    """1: collect the next rollout with the previous weights while the update runs (Cleanba); 0: synchronous"""
    watchdog_s: float = 900.0
    """the learner's main thread back in none of its loops this long (twice cluster.collective_timeout_s if longer) is taken for hung: stacks to the log, exit 1"""
    batch_checksum: bool = False
    """debug: record batch_checksum (the sum of the observations each update read, after it read them) in metrics.jsonl; one pass over the batch per update"""


@dataclass
class ClusterConfig:
    actors: int = -1
    """actor processes launch.py starts (-1: from the cores, see cluster.envs)"""
    envs_per_actor: int = 0
    """environments each actor process hosts (0: cluster.envs / actors)"""
    envs: int = 8
    """env slots in all when actors or envs_per_actor is left to choose (CleanRL's 8); explicit values win"""
    groups: int = 1
    """env groups per actor launch.py starts (--groups): 2 steps one half while the other waits for actions"""
    stack_on_learner: bool = True
    """Atari: actors send each env's newest frame only and the learner stacks env.frame_stack of them"""
    address: str = "local"
    """where the learner binds its request socket: 'local' (this user on this machine only: a Unix socket in a private 0700 directory, cheaper than TCP; see docs/reliability.md), or tcp:// or ipc://; port 0 picks a free one (the address bound is in RUN_DIR/endpoints.json); set a tcp one for actors that join from elsewhere"""
    weights_address: str = "tcp://127.0.0.1:0"
    """where the learner publishes weights; port 0 picks a free one"""
    advertise_host: str = ""
    """the host name or IP address actors reach this learner at, in redirects and endpoints.json ('': the bound host; this node's host name when bound to every interface)"""
    min_envs: int = 0
    """env slots the learner waits for before the first rollout only (0: actors x envs_per_actor)"""
    actor_timeout_s: float = 10.0
    """an actor silent for this long while it owes a step report is retired"""
    startup_timeout_s: float = 600.0
    """the run ends, naming the actors it waited on, if its first rollout cannot start within this (0: wait)"""
    learners: int = 1
    """learner ranks on this host (launch.py --learners): data-parallel PPO over torch.distributed"""
    collectors: int = 0
    """collector processes on each learner rank (receive, validate, stack, infer, fill their rollout columns); 0: from the device and cores (1 on a CPU device, in deterministic runs and with normalize.obs)"""
    collective_timeout_s: float = 300.0
    """a learner rank waits this long for the others in a collective before the job stops with an error"""
    max_message_mb: int = 64
    """largest message accepted on a socket"""
    memory_budget_mb: int = 0
    """the learner's memory for all actors' rollouts together, in MB: a handshake that would pass it waits until slots free up (0: half of this machine's memory)"""
    max_envs_per_actor: int = 0
    """env slots one actor may claim; a handshake claiming more is refused (0: 256, or the run's own envs if more, within the budget)"""
    codec: str = "auto"
    """how actors' observation frames travel: 'auto' (zstd for actors over TCP beyond loopback, raw on the local socket and 127.0.0.1), 'none' (raw), 'zstd' or 'lz4' (when the actor has it; raw for actors without). See docs/scaling.md"""
    server_key: str = ""
    """CURVE: the learner's secret key file (required to bind beyond loopback)"""
    allowed_keys: str = ""
    """CURVE: directory of the public keys of actors allowed in"""
    client_key: str = ""
    """CURVE: secret key file launch.py's own actors use (its public key must be in allowed_keys)"""


@dataclass
class PPOConfig:
    num_steps: int = 128
    """steps per env per rollout (T)"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    learning_rate: float = 2.5e-4
    """Adam learning rate at the start"""
    lr_schedule: str = "linear"
    """linear: `lr0 * (1 - env_steps_done / total_steps)` (CleanRL) | constant | adaptive: after every epoch (or minibatch, lr_adapt_every) lr / 1.5 when its approx_kl (averaged over ranks and the epoch's minibatches) > 2 x lr_kl_threshold, x 1.5 when < lr_kl_threshold / 2, within [lr_min, lr_max] (rl_games)"""
    anneal_lr: bool = True
    """CleanRL's switch, kept for old configs: false turns lr_schedule linear into constant"""
    lr_kl_threshold: float = 0.008
    """adaptive schedule: the KL the learning rate is steered towards (rl_games' kl_threshold)"""
    lr_adapt_every: str = "epoch"
    """adaptive schedule: apply the rule after each epoch on its mean KL (rl_games' discrete PPO) | minibatch (rl_games' continuous default)"""
    lr_min: float = 1e-6
    """adaptive schedule: lowest learning rate"""
    lr_max: float = 1e-2
    """adaptive schedule: highest learning rate"""
    adam_eps: float = 1e-5
    """Adam epsilon"""
    update_epochs: int = 4
    """passes over the rollout per update"""
    num_minibatches: int = 4
    """shuffled minibatches per epoch"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    variant: str = "clip"
    """clip (clipped surrogate) | kl (adaptive KL penalty)"""
    clip_coef: float = 0.1
    """surrogate clipping range"""
    clip_vloss: bool = True
    """clip the value loss with clip_coef around the old values"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    kl_target: float = 0.01
    """kl variant: d_targ; beta halves below d_targ/1.5 and doubles above 1.5 d_targ"""
    kl_beta: float = 1.0
    """kl variant: initial penalty coefficient"""
    target_kl: float = 0.0
    """stop the epochs early once approx_kl exceeds this (0 disables)"""


@dataclass
class ModelConfig:
    kind: str = "auto"
    """auto (cnn for images, mlp for vectors) | cnn | mlp"""
    hidden: int = 64
    """mlp: width of each of the two tanh layers"""
    activation: str = "relu"
    """cnn: the trunk's nonlinearity, relu (CleanRL's Nature CNN) | elu (rl_games' Atari networks)"""
    normalize_input: bool = False
    """cnn: standardize each pixel of the scaled frames by its running mean/std (clipped to +-5) inside the network, the statistics folded in from each update's batch after its epochs (rl_games' normalize_input)"""


@dataclass
class NormalizeConfig:
    obs: bool = False
    """running mean/std observation normalization, clipped to [-clip, clip] (vector observations; refused for uint8 images)"""
    reward: bool = False
    """scale rewards by the std of the discounted return, clipped to [-clip, clip]"""
    value: bool = False
    """value normalization (rl_games): the critic learns returns standardized by their running mean/std; its outputs are de-normalized for GAE and bootstrapping"""
    clip: float = 10.0
    """clip bound for normalized observations and scaled rewards"""


@dataclass
class LogConfig:
    keep_checkpoints: int = 3
    """newest checkpoints kept (plus best.pt, the best by smoothed return)"""
    tensorboard: bool = True
    """write TensorBoard event files into RUN_DIR/tb"""
    track: bool = False
    """also log to Weights & Biases (needs wandb installed)"""
    wandb_project: str = "ppo-cluster"
    """Weights & Biases project name"""
    progress_bar: bool = True
    """a live progress bar when stdout is a terminal"""


@dataclass
class EvalConfig:
    every: int = 0
    """play evaluation episodes every this many updates (0: no evaluation during training)"""
    episodes: int = 5
    """episodes per evaluation"""
    greedy: bool = False
    """evaluate with the most likely action instead of sampling"""
    video_every: int = 0
    """record a video every this many updates into RUN_DIR/videos (0: never)"""
    sticky_actions: float = -1.0
    """evaluation sticky-action probability (-1: same as training)"""


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    env: EnvSettings = field(default_factory=EnvSettings)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    log: LogConfig = field(default_factory=LogConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    @property
    def num_envs(self) -> int:
        actors, envs_per_actor = topology(self.cluster)
        return actors * envs_per_actor

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def sections() -> dict[str, type]:
    return {f.name: f.type if isinstance(f.type, type) else _resolve(f.type) for f in dataclasses.fields(Config)}


def _resolve(name: str) -> type:
    return {"RunConfig": RunConfig, "EnvSettings": EnvSettings, "ClusterConfig": ClusterConfig,
            "PPOConfig": PPOConfig, "ModelConfig": ModelConfig, "NormalizeConfig": NormalizeConfig,
            "LogConfig": LogConfig, "EvalConfig": EvalConfig}[name]


def _field_types(cls) -> dict[str, type]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(key: str, value, want: type):
    """Check a TOML value against the field's type; ints are accepted where floats are wanted."""
    if want is bool:
        if isinstance(value, bool):
            return value
    elif want is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif want is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif want is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{key}: expected {want.__name__}, got {value!r}")


def from_dict(data: dict, base: Config | None = None) -> Config:
    cfg = base or Config()
    if not isinstance(data, dict):
        raise ConfigError("config: expected a table of sections")
    known = sections()
    for name, table in data.items():
        if name not in known:
            raise ConfigError(f"unknown config section [{name}] (known: {', '.join(known)})")
        if not isinstance(table, dict):
            raise ConfigError(f"[{name}] must be a table")
        section = getattr(cfg, name)
        types = _field_types(known[name])
        for key, value in table.items():
            if key not in types:
                raise ConfigError(f"unknown config key {name}.{key}")
            setattr(section, key, _coerce(f"{name}.{key}", value, types[key]))
    validate(cfg)
    return cfg


def load(path: str | Path, overrides: list[str] = ()) -> Config:
    path = Path(path)
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    cfg = from_dict(data)
    return apply_overrides(cfg, overrides)


def read_text(path: Path) -> str:
    """A config file's text: UTF-8 (a byte-order mark allowed); anything else is one ConfigError."""
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a config file (name a .toml file, e.g. configs/smoke.toml)")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                          "TOML files are UTF-8: save it as UTF-8") from None


def parse_override(text: str) -> tuple[str, str, object]:
    """'section.key=value' -> (section, key, value); the value is read as TOML, else as a bare string."""
    lhs = text.split("=", 1)[0].strip()
    section, _, key = lhs.partition(".")
    if "=" not in text or not section or not key or "." in key or any(ch.isspace() for ch in lhs):
        raise ConfigError(f"--set {text!r}: expected section.key=value (e.g. --set ppo.learning_rate=0.001)")
    raw = text.split("=", 1)[1].strip()
    if "\n" in raw or "\r" in raw or "\x00" in raw:
        raise ConfigError(f"--set {text!r}: the value must be one line")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key, value


def apply_overrides(cfg: Config, overrides: list[str]) -> Config:
    data: dict[str, dict] = {}
    for text in overrides:
        section, key, value = parse_override(text)
        data.setdefault(section, {})[key] = value
    return from_dict(data, base=cfg) if data else cfg


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


def with_topology(cfg: "Config", cores: int | None = None) -> "Config":
    """cfg with actors and envs_per_actor chosen (what launch.py starts, and what config.toml records)."""
    actors, per = topology(cfg.cluster, cores)
    return dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, actors=actors, envs_per_actor=per))


def check_multi_rank(cfg: Config, why: str) -> None:
    """What a G-rank learner does not support yet: say so before anything starts."""
    _require(cfg.run.policy_lag == 0, f"run.policy_lag = 1 is not supported with {why}: set run.policy_lag = 0")
    _require(not (cfg.normalize.obs or cfg.normalize.reward),
             f"normalize.obs / normalize.reward keep per-learner statistics and are not supported with {why}")


def check_collectors(cfg: Config) -> None:
    """cluster.collectors: in range, and one process where several would not be exact or would diverge."""
    k = cfg.cluster.collectors
    _require(0 <= k <= 64, f"cluster.collectors must be in [0, 64] (0: from the device and cores), got {k}")
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


SEED_MAX = 2**32 - 1  # numpy's legacy seeding, and every env seed derived from it fits the ALE's range
DAY_S = 86_400.0
MAX_ROLLOUT = 2**22  # samples (num_steps x env slots) in one rollout: 4M Atari samples are ~115 GB already
MAX_STEPS = 2**62    # agent steps: room for any count, far from int64's end


def validate(cfg: Config) -> None:
    """Every value finite and within its stated bounds; the first that is not raises ConfigError naming the key,
    the value and the rule."""
    _check_finite(cfg)
    _check_run(cfg.run)
    _check_topology(cfg)
    _check_addresses(cfg.cluster)
    _check_cluster_limits(cfg)
    _check_ppo(cfg)
    _require((why := check_admission_config(cfg)) is None, why)  # the memory budget's keys
    _check_lr(cfg.ppo)
    _check_model(cfg)
    _check_log_eval(cfg)
    _check_env(cfg.env)


def _in(key: str, value, low, high, note: str = "") -> None:
    _require(low <= value <= high, f"{key} must be in [{_num(low)}, {_num(high)}]{note}, got {value!r}")


def _above(key: str, value, low, high, note: str = "") -> None:
    """low < value <= high."""
    _require(low < value <= high, f"{key} must be > {_num(low)} and <= {_num(high)}{note}, got {value!r}")


def _num(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _check_finite(cfg: Config) -> None:
    for name, table in cfg.to_dict().items():
        for key, value in table.items():
            _require(not isinstance(value, float) or math.isfinite(value),
                     f"{name}.{key} must be a finite number, got {value!r}")


def _check_run(r: RunConfig) -> None:
    _in("run.seed", r.seed, 0, SEED_MAX)
    _in("run.total_steps", r.total_steps, 1, MAX_STEPS)
    _require(r.device in ("auto", "cpu", "cuda"), f"run.device must be auto, cpu or cuda, got {r.device!r}")
    _in("run.checkpoint_every", r.checkpoint_every, 1, 2**31 - 1, " (updates)")
    _require(r.policy_lag in (0, 1), f"run.policy_lag must be 0 or 1, got {r.policy_lag}")
    _in("run.torch_threads", r.torch_threads, 0, 4096, " (0: torch's default)")
    _in("run.watchdog_s", r.watchdog_s, 1.0, 7 * DAY_S, " seconds")


def _check_topology(cfg: Config) -> None:
    c = cfg.cluster
    _require(c.actors >= -1, f"cluster.actors must be >= 0 (or -1: from the cores), got {c.actors}")
    _require(0 <= c.envs_per_actor <= MAX_ENV_SLOTS,
             f"cluster.envs_per_actor must be in [1, {MAX_ENV_SLOTS}] (or 0: cluster.envs / actors), got {c.envs_per_actor}")
    _require(c.groups in (1, 2), f"cluster.groups must be 1 or 2, got {c.groups}")
    _require(1 <= c.envs <= MAX_ENV_SLOTS, f"cluster.envs must be in [1, {MAX_ENV_SLOTS}], got {c.envs}")
    _require(cfg.num_envs <= MAX_ENV_SLOTS, f"cluster.actors x cluster.envs_per_actor = {cfg.num_envs} env slots: "
             f"more than the learner's limit of {MAX_ENV_SLOTS}")
    _require(0 <= c.min_envs <= MAX_ENV_SLOTS, f"cluster.min_envs must be in [0, {MAX_ENV_SLOTS}] (the learner's "
             f"limit of env slots), got {c.min_envs}")
    _require(1 <= c.learners <= 64, f"cluster.learners must be in [1, 64], got {c.learners}")
    check_collectors(cfg)
    if c.learners > 1:
        check_multi_rank(cfg, f"cluster.learners = {c.learners}")


def _check_addresses(c: ClusterConfig) -> None:
    _require(c.address == LOCAL or c.address.startswith(("tcp://", "ipc://")),
             f"cluster.address must be '{LOCAL}' or start with tcp:// or ipc://, got {c.address!r}")
    _require(c.weights_address.startswith(("tcp://", "ipc://")),
             f"cluster.weights_address must start with tcp:// or ipc://, got {c.weights_address!r}")
    for key in ("address", "weights_address"):
        _check_port(f"cluster.{key}", getattr(c, key))
    _require(c.advertise_host == "" or _is_host(c.advertise_host),
             f"cluster.advertise_host must be a host name or an IP address other actors can reach (not a wildcard "
             f"such as 0.0.0.0), got {c.advertise_host!r}")
    _require(c.address != c.weights_address or c.address.endswith(":0"),
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


def _check_cluster_limits(cfg: Config) -> None:
    c = cfg.cluster
    _in("cluster.actor_timeout_s", c.actor_timeout_s, 1.0, DAY_S, " seconds")
    _in("cluster.startup_timeout_s", c.startup_timeout_s, 0.0, 7 * DAY_S, " seconds (0: wait)")
    _above("cluster.collective_timeout_s", c.collective_timeout_s, 0.0, DAY_S, " seconds")
    _require(1 <= c.max_message_mb <= 4096, f"cluster.max_message_mb must be in [1, 4096], got {c.max_message_mb}")
    _require(c.codec in ("auto", "none", *compression.available()), f"cluster.codec must be auto, none or a codec "
             f"installed here ({', '.join(compression.available()) or 'none installed'}), got {c.codec!r}")


def _check_ppo(cfg: Config) -> None:
    p = cfg.ppo
    _in("ppo.num_steps", p.num_steps, 1, MAX_ROLLOUT)
    width = max(cfg.num_envs, cfg.cluster.min_envs, 1)
    _require(p.num_steps * width <= MAX_ROLLOUT, f"ppo.num_steps x env slots = {p.num_steps} x {width} = "
             f"{p.num_steps * width} samples per rollout: more than the limit of {MAX_ROLLOUT}")
    _in("ppo.gamma", p.gamma, 0, 1)
    _in("ppo.gae_lambda", p.gae_lambda, 0, 1)
    _in("ppo.update_epochs", p.update_epochs, 1, 10_000)
    _require(1 <= p.num_minibatches <= p.num_steps * width, f"ppo.num_minibatches must be in [1, {p.num_steps * width}] "
             f"(the samples of a rollout, ppo.num_steps x env slots; more: a minibatch would hold less than one sample), "
             f"got {p.num_minibatches}")
    _require(p.variant in ("clip", "kl"), f"ppo.variant must be clip or kl, got {p.variant!r}")
    _above("ppo.clip_coef", p.clip_coef, 0, 10)
    _in("ppo.vf_coef", p.vf_coef, 0, 1000)
    _in("ppo.ent_coef", p.ent_coef, 0, 1000)
    _in("ppo.kl_target", p.kl_target, 0, 100)
    _in("ppo.target_kl", p.target_kl, 0, 100, " (0 disables)")
    _above("ppo.max_grad_norm", p.max_grad_norm, 0, 1e6)
    _above("ppo.kl_beta", p.kl_beta, 0, 1e6)


def _check_lr(p: PPOConfig) -> None:
    _above("ppo.learning_rate", p.learning_rate, 0, 1)
    _require(p.lr_schedule in LR_SCHEDULES, f"ppo.lr_schedule must be linear, constant or adaptive, got {p.lr_schedule!r}")
    _require(0 < p.lr_min <= p.lr_max <= 1, f"ppo.lr_min and ppo.lr_max must satisfy 0 < lr_min <= lr_max <= 1, "
             f"got {p.lr_min}, {p.lr_max}")
    _require(p.lr_schedule != "adaptive" or p.lr_min <= p.learning_rate <= p.lr_max,
             f"ppo.learning_rate {p.learning_rate} must lie in [ppo.lr_min, ppo.lr_max] = [{p.lr_min}, {p.lr_max}] "
             "with lr_schedule adaptive")
    _require(p.lr_adapt_every in ("epoch", "minibatch"),
             f"ppo.lr_adapt_every must be epoch or minibatch, got {p.lr_adapt_every!r}")
    _above("ppo.lr_kl_threshold", p.lr_kl_threshold, 0, 10)
    _above("ppo.adam_eps", p.adam_eps, 0, 1)


def _check_model(cfg: Config) -> None:
    m, n = cfg.model, cfg.normalize
    _require(m.kind in ("auto", "cnn", "mlp"), f"model.kind must be auto, cnn or mlp, got {m.kind!r}")
    _require(m.activation in ACTIVATIONS, f"model.activation must be relu or elu, got {m.activation!r}")
    _in("model.hidden", m.hidden, 1, 65_536)
    _require(not (n.value and cfg.run.policy_lag), "normalize.value is not supported with run.policy_lag = 1 "
             "(the lagged policy's value head would be read with the newer statistics): set one of them off")
    _above("normalize.clip", n.clip, 0, 1e6)


def _check_log_eval(cfg: Config) -> None:
    _in("log.keep_checkpoints", cfg.log.keep_checkpoints, 1, 100_000)
    ev = cfg.eval
    _in("eval.every", ev.every, 0, 2**31 - 1, " (updates; 0: never)")
    _in("eval.video_every", ev.video_every, 0, 2**31 - 1, " (updates; 0: never)")
    _in("eval.episodes", ev.episodes, 1, 100_000)
    _require(ev.sticky_actions == -1.0 or 0 <= ev.sticky_actions <= 1,
             f"eval.sticky_actions must be -1 or in [0, 1], got {ev.sticky_actions}")


def _check_env(e: EnvSettings) -> None:
    _require(bool(e.env_id.strip()), "env.env_id must not be empty")
    _in("env.noop_max", e.noop_max, 0, 1000)
    _in("env.frame_skip", e.frame_skip, 1, 100)
    _in("env.frame_stack", e.frame_stack, 1, 16)
    _in("env.resolution", e.resolution, 8, 512)
    _in("env.sticky_actions", e.sticky_actions, 0, 1)
    _in("env.max_episode_steps", e.max_episode_steps, 0, 2**31 - 1, " (0: the env's own limit)")


RESUME_FIXED = ("env", "model", "normalize.obs", "normalize.reward", "normalize.value", "ppo.variant")


def check_resume(saved: Config, cfg: Config, what: str) -> None:
    """What a resume may not change: the env (its data), the network, the statistics it was trained with."""
    old, new = saved.to_dict(), cfg.to_dict()
    for name in RESUME_FIXED:
        section, _, key = name.partition(".")
        for k in ([key] if key else old[section]):
            _require(old[section][k] == new[section][k], f"{what}: {section}.{k} cannot change on resume (the "
                     f"run's is {old[section][k]!r}, asked {new[section][k]!r}); start a new run for that")


def to_toml(cfg: Config) -> str:
    """The resolved config as TOML (flat sections of scalars, so a tiny writer suffices)."""
    lines = []
    for name, table in cfg.to_dict().items():
        lines.append(f"[{name}]")
        for key, value in table.items():
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, str):
                text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
            else:
                text = repr(value)
            lines.append(f"{key} = {text}")
        lines.append("")
    return "\n".join(lines)


def field_docs() -> list[tuple[str, object, str]]:
    """(section.key, default, doc) for every config key, read from the docstrings in this file."""
    out = []
    for name, cls in sections().items():
        docs = _docstrings(cls)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            out.append((f"{name}.{f.name}", default, docs.get(f.name, "")))
    return out


def _docstrings(cls) -> dict[str, str]:
    import inspect
    source = inspect.getsource(cls)
    tree = ast.parse(source)
    docs, body = {}, tree.body[0].body
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = str(nxt.value.value).strip()
    return docs
