"""The run configuration: one pydantic model per TOML section, the schema everything else comes from.

Each key is declared once, below: its type, its default, its rule (bounds with Field(ge=, le=, ...), choices as
Literal[...]) and, in the docstring under it, its meaning. From that come the TOML and --set parsing (one path:
from_dict), the one-line error for a bad value (protocol/settings.py's describe), `python launch.py --help-config`
and docs/configuration.md (learner/config_docs.py). The rules between keys (topology, addresses, the learning
rate's range ...) live in learner/config_rules.py (validate), run once the model is built.

Torch-free on purpose: launch.py validates a config (and exits 2 on a bad one) before any heavy import.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationError

from learner.config_rules import MAX_ROLLOUT, ConfigError, lr_schedule, topology, validate
from learner.model import registry as encoders
from protocol import compression
from protocol.messages import FLOAT32_MAX, MAX_ENV_SLOTS, MAX_GROUPS
from protocol.settings import SCHEMA, EnvSettings, Rule, describe
from protocol.transport import LOCAL

SEED_MAX = 2**32 - 1  # numpy's legacy seeding, and every env seed derived from it fits the ALE's range
DAY_S = 86_400.0
MAX_STEPS = 2**62    # agent steps: room for any count, far from int64's end
INT32 = 2**31 - 1

# the kinds of value several keys share, each with its bounds
Updates = Annotated[int, Field(ge=1, le=INT32)]
EveryUpdates = Annotated[int, Field(ge=0, le=INT32)]  # 0: never
Slots = Annotated[int, Field(ge=0, le=MAX_ENV_SLOTS)]  # env slots, 0: derived
GroupCount = Annotated[int | str, BeforeValidator(Rule(f"in [1, {MAX_GROUPS}] or 'auto'", lambda v: v == "auto" or (
    type(v) is int and 1 <= v <= MAX_GROUPS)))]  # before the union's own checks: one error line, not one per member
Count = Annotated[int, Field(ge=1, le=100_000)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
Rate = Annotated[float, Field(gt=0.0, le=1.0)]
Coef = Annotated[float, Field(ge=0.0, le=1000.0)]
KL = Annotated[float, Field(ge=0.0, le=100.0)]
Positive = Annotated[float, Field(gt=0.0, le=1e6)]
Device = Literal["auto", "cpu", "cuda"]
SameOrUnit = Annotated[float, AfterValidator(Rule("-1 or in [0, 1]", lambda p: p == -1.0 or 0.0 <= p <= 1.0))]


class RunConfig(BaseModel):
    model_config = SCHEMA

    seed: Annotated[int, Field(ge=0, le=SEED_MAX)] = 1
    """run seed; every env slot derives its own seed from it"""
    total_steps: Annotated[int, Field(ge=1, le=MAX_STEPS)] = 10_000_000
    """agent steps (summed over all envs) to train for"""
    device: Device = "auto"
    """auto (cuda when available) | cpu | cuda"""
    deterministic: bool = False
    """same seed + config on CPU give the same metrics: lock-step collection, deterministic kernels"""
    torch_threads: Annotated[int, Field(ge=0, le=4096)] = 0
    """threads for the learner's torch ops (0: torch's default)"""
    checkpoint_every: Updates = 50
    """write a checkpoint every this many updates (and always at the end)"""
    checkpoint_every_minutes: Annotated[float, Field(ge=0.0, le=7 * DAY_S / 60)] = 10.0
    """write a checkpoint also when this many minutes passed since the last one (0: by updates only), so a crash costs minutes however long an update takes"""
    collect_only: bool = False
    """run actors and inference without gradient updates (throughput measurement)"""
    random_policy: bool = False
    """answer actors with uniform random actions instead of running the network"""
    policy_lag: Annotated[int, Field(ge=0, le=1)] = 0
    """1: collect the next rollout with the previous weights while the update runs (Cleanba); once it is done, its weights serve the rest of the rollout and groups that finish go on into the next one (in the training process, in every collector process, on every learner rank); 0: synchronous"""
    segments: bool = False
    """a rollout of ppo.num_steps x env slots steps from whichever slots produce them, in segments of up to num_steps (Sample Factory's and IMPALA's trajectories): a slot that finishes its segment early starts another in the same rollout, and once the rollout holds its steps the slow slots' unfinished segments are cut there (bootstrapped from the value of their next observation, as at any rollout's end) and go on in the next: actors of different speeds each at their own pace, none waiting for the slowest at a rollout's end. Each step is trained in the rollout it was acted in (none older than run.policy_lag); a step in flight at the close is dropped and counted (dropped_samples). false: one column of num_steps steps per env slot, the slowest slot paces the rollout. With cluster.collectors = K the quota is the job's: every collector process closes its share once the K collectors' completed steps together make num_steps x every env slot, so a collector whose actors are fast fills more than its own slots' num_steps steps and a slow one's share is cut (each keeps room for 2 columns per env slot of its own, as the admission budget counts). On G ranks the quota is the job's too: every collector of every rank counts its completed steps on a store every rank reaches, so a rank whose actors are fast trains on more of the job's batch and the slower rank's actors no longer pace the job. Not with run.deterministic, normalize.reward or model.core (yet)"""
    watchdog_s: Annotated[float, Field(ge=1.0, le=7 * DAY_S)] = 900.0
    """the learner's main thread back in none of its loops this long (twice cluster.collective_timeout_s if longer) is taken for hung: stacks to the log, exit 1"""
    learner_silent_s: Annotated[float, Field(ge=2.0, le=7 * DAY_S)] = 30.0
    """launch.py kills a learner process whose heartbeat (beaten every 0.5 s by a thread of its own, counted from its spawn) is this old: stopped whole (SIGSTOP), before its first beat too, or frozen, where its own watchdog cannot run; the restart policy then decides"""
    batch_checksum: bool = False
    """debug: record batch_checksum (the sum of the observations each update read, after it read them) in metrics.jsonl; one pass over the batch per update"""


class ClusterConfig(BaseModel):
    model_config = SCHEMA

    actors: Annotated[int, Field(ge=-1)] = -1
    """actor processes launch.py starts (-1: from the cores, see cluster.envs)"""
    envs_per_actor: Slots = 0
    """environments each actor process hosts (0: cluster.envs / actors)"""
    envs: Annotated[int, Field(ge=1, le=MAX_ENV_SLOTS)] = 8
    """env slots in all when actors or envs_per_actor is left to choose (CleanRL's 8); explicit values win"""
    groups: GroupCount = 1
    """env groups per actor launch.py starts (--groups), stepped in turn on the actor's core: while one waits for actions another steps (2: halves); 'auto': each actor times its first seconds as one group and rejoins with the fewest groups that keep its core 95% busy for the round trip it measured (actor/group_count.py)"""
    stack_on_learner: bool = True
    """Atari: actors send each env's newest frame only and the learner stacks env.frame_stack of them"""
    address: str = "local"
    """where the learner binds its request socket: 'local' (this user on this machine only: a Unix socket in a private 0700 directory, cheaper than TCP; see docs/reliability.md), or tcp:// or ipc://; port 0 picks a free one (the address bound is in RUN_DIR/endpoints.json); set a tcp one for actors that join from elsewhere"""
    weights_address: str = "local"
    """where the learner publishes weights (to its eval worker): 'local' (this user on this machine only: a Unix socket beside the request socket's, in the same private 0700 directory; see docs/reliability.md), or tcp:// or ipc://; port 0 picks a free one; a tcp one beyond loopback needs CURVE keys, as cluster.address does"""
    advertise_host: str = ""
    """the host name or IP address actors reach this learner at, in redirects and endpoints.json ('': the bound host; this node's host name when bound to every interface)"""
    min_envs: Slots = 0
    """env slots the learner waits for before the first rollout only (0: actors x envs_per_actor)"""
    actor_timeout_s: Annotated[float, Field(ge=1.0, le=DAY_S)] = 10.0
    """an actor silent for this long while it owes a step report is retired"""
    startup_timeout_s: Annotated[float, Field(ge=0.0, le=7 * DAY_S)] = 600.0
    """the run ends, naming the actors it waited on, if its first rollout cannot start within this (0: wait)"""
    no_actors_timeout_s: Annotated[float, Field(ge=0.0, le=7 * DAY_S)] = 300.0
    """after the first rollout, the run ends (exit 1, not restarted: launch.py's actors past their restart limit, or none joining) when no actor has had an env slot ready for this long (0: wait for actors for ever)"""
    learners: Annotated[int, Field(ge=1, le=64)] = 1
    """learner ranks on this host (launch.py --learners): data-parallel PPO over torch.distributed"""
    collectors: Annotated[int, Field(ge=0, le=64)] = 0
    """collector processes on each learner rank (receive, validate, stack, infer, fill their rollout columns); 0: from the device and cores (1 on a CPU device, in deterministic runs and with normalize.obs)"""
    collective_timeout_s: Annotated[float, Field(gt=0.0, le=DAY_S)] = 300.0
    """a learner rank waits this long for the others in a collective before the job stops with an error"""
    max_message_mb: Annotated[int, Field(ge=1, le=4096)] = 64
    """largest message accepted on a socket"""
    max_abs_reward: Annotated[float, Field(gt=0.0, le=FLOAT32_MAX)] = 1e6
    """the largest |reward| a step report may carry: one with a larger, NaN or inf reward is refused naming this key and its actor retired and struck (float32 GAE and the value loss overflow on rewards near 1e38)"""
    max_abs_obs: Annotated[float, Field(gt=0.0, le=FLOAT32_MAX)] = 1e6
    """the same bound for every element of a float observation (images are uint8, bounded by their type)"""
    memory_budget_mb: Annotated[int, Field(ge=0)] = 0
    """the learner's memory for all actors' rollouts together, in MB: a handshake that would pass it waits until slots free up (0: half of this machine's memory)"""
    max_envs_per_actor: Annotated[int, Field(ge=0, le=MAX_ENV_SLOTS)] = 0
    """env slots one actor may claim; a handshake claiming more is refused (0: 256, or the run's own envs if more, within the budget)"""
    codec: Literal[compression.SETTINGS] = "auto"
    """how actors' observation frames travel: 'auto' (zstd for actors over TCP beyond loopback, raw on the local socket and 127.0.0.1), 'none' (raw), 'zstd' or 'lz4' (when the actor has it; raw for actors without). See docs/scaling.md"""
    server_key: str = ""
    """CURVE: the learner's secret key file (required to bind beyond loopback)"""
    allowed_keys: str = ""
    """CURVE: directory of the public keys of actors allowed in"""
    client_key: str = ""
    """CURVE: secret key file launch.py's own actors use (its public key must be in allowed_keys)"""


class PPOConfig(BaseModel):
    model_config = SCHEMA

    num_steps: Annotated[int, Field(ge=1, le=MAX_ROLLOUT)] = 128
    """steps per env per rollout (T)"""
    gamma: Unit = 0.99
    """discount"""
    gae_lambda: Unit = 0.95
    """GAE lambda"""
    learning_rate: Rate = 2.5e-4
    """Adam learning rate at the start"""
    lr_schedule: Literal["linear", "constant", "adaptive"] = "linear"
    """linear: `lr0 * (1 - env_steps_done / total_steps)` (CleanRL) | constant | adaptive: after every epoch (or minibatch, lr_adapt_every) lr / 1.5 when its approx_kl (averaged over ranks and the epoch's minibatches) > 2 x lr_kl_threshold, x 1.5 when < lr_kl_threshold / 2, within [lr_min, lr_max] (rl_games)"""
    lr_anneal_steps: Annotated[int, Field(ge=0)] = 0
    """linear schedule: the agent steps over which the rate falls to 0, and stays there (0: run.total_steps, CleanRL's); a recipe's own horizon keeps its schedule whatever budget a command gives the run"""
    anneal_lr: bool = True
    """CleanRL's switch, kept for old configs: false turns lr_schedule linear into constant"""
    lr_kl_threshold: Annotated[float, Field(gt=0.0, le=10.0)] = 0.008
    """adaptive schedule: the KL the learning rate is steered towards (rl_games' kl_threshold)"""
    lr_adapt_every: Literal["epoch", "minibatch"] = "epoch"
    """adaptive schedule: apply the rule after each epoch on its mean KL (rl_games' discrete PPO) | minibatch (rl_games' continuous default)"""
    lr_min: Rate = 1e-6
    """adaptive schedule: lowest learning rate"""
    lr_max: Rate = 1e-2
    """adaptive schedule: highest learning rate"""
    adam_eps: Rate = 1e-5
    """Adam epsilon"""
    update_epochs: Annotated[int, Field(ge=1, le=10_000)] = 4
    """passes over the rollout per update"""
    num_minibatches: Annotated[int, Field(ge=1, le=MAX_ROLLOUT)] = 4
    """shuffled minibatches per epoch (at most the samples of a rollout)"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    variant: Literal["clip", "kl"] = "clip"
    """clip (clipped surrogate) | kl (adaptive KL penalty)"""
    clip_coef: Annotated[float, Field(gt=0.0, le=10.0)] = 0.1
    """surrogate clipping range"""
    clip_vloss: bool = True
    """clip the value loss with clip_coef around the old values"""
    lag_decoupled: bool = True
    """run.policy_lag = 1 only: PPO's decoupled objective (Hilton et al. 2021): the policy clip centred on the policy the update starts from, each sample weighted by pi_start / pi_behaviour (truncated at ppo.lag_weight_max); false: clipped around the behaviour policy (the lag's distance then counts as a step taken)"""
    lag_weight_max: Annotated[float, Field(ge=0.0, le=100.0)] = 1.0
    """ppo.lag_decoupled only: each sample's weight pi_start / pi_behaviour truncated at this (V-trace's rho-bar, Espeholt et al. 2018: less variance, some bias; unbounded or 2, Pendulum with lag missed -400 within 300k steps); 0: unbounded"""
    lag_fresh_advantages: bool = False
    """run.policy_lag only: the update runs GAE again with the critic it starts from (its values for every sample, the bootstrap and final observations) instead of the acting critic's, one version older; on pong-fast those halve how fast the value statistics move (issue 40)"""
    vf_coef: Coef = 0.5
    """value loss coefficient"""
    ent_coef: Coef = 0.01
    """entropy bonus coefficient (at the start, with ent_schedule linear)"""
    ent_schedule: Literal["constant", "linear"] = "constant"
    """constant: ent_coef throughout | linear: ent_coef falls to 0 at a horizon (`ent_coef * (1 - env_steps_done / horizon)`, the horizon ppo.ent_anneal_steps, else the learning rate's: ppo.lr_anneal_steps, else run.total_steps), and stays there: exploration early, a sharper policy late"""
    ent_anneal_steps: Annotated[int, Field(ge=0)] = 0
    """ent_schedule linear: the agent steps over which the entropy bonus falls to 0, and stays there (0: the learning rate's horizon); the policy can sharpen by the bonus while the rate keeps a longer line"""
    max_grad_norm: Positive = 0.5
    """global gradient-norm clip"""
    kl_target: KL = 0.01
    """kl variant: d_targ; beta halves below d_targ/1.5 and doubles above 1.5 d_targ"""
    kl_beta: Positive = 1.0
    """kl variant: initial penalty coefficient"""
    target_kl: KL = 0.0
    """stop the epochs early once approx_kl exceeds this (0 disables)"""
    bptt: Annotated[int, Field(ge=0, le=MAX_ROLLOUT)] = 0
    """model.core lstm / gru: steps of each sequence the update replays (truncated backpropagation through time), a divisor of ppo.num_steps; each env slot's rollout is cut into num_steps / bptt sequences, each started from the state the acting policy had there, and the minibatches are made of whole sequences (0: the whole rollout, one sequence per env slot)"""
    update_precision: Literal["fp32", "bf16", "auto"] = "fp32"
    """fp32 | bf16: the update's forward and backward passes through the encoder (the CNN's convs and hidden layer) under bfloat16 autocast (1.4x faster than fp32 in benchmarks/update_cost.py on avx512_bf16 cores, several times slower on AVX2-only ones); the weights, Adam's state, the heads (log-probs, values) and the loss stay float32. Acting and evaluation stay float32 | auto: bf16 where the device computes bfloat16 at speed (a GPU that supports it, a CPU with AVX-512 or newer: oneDNN's check), else fp32; the learner's log says which"""


class ModelConfig(BaseModel):
    model_config = SCHEMA

    kind: Literal[encoders.KINDS] = Field(encoders.AUTO, description=encoders.kind_doc())  # learner/model/registry.py
    hidden: Annotated[int, Field(ge=1, le=65_536)] = 64
    """mlp: width of each of the two tanh layers"""
    activation: Literal["relu", "elu"] = Field("relu", description=f"{encoders.pixel_kinds()}: the trunk's nonlinearity, "
                                               "relu (CleanRL's Nature CNN) | elu (rl_games' Atari networks)")
    normalize_input: bool = Field(False, description=f"{encoders.pixel_kinds()}: standardize each pixel of the scaled frames by its running mean/std (clipped to +-5) inside the network, the statistics folded in from each update's batch after its epochs (rl_games' normalize_input)")
    core: Literal["none", "lstm", "gru"] = Field("none", description=f"none (feed-forward) | lstm | gru: a recurrent core between the encoder and the heads ({encoders.pixel_kinds()}: on the encoder's features, the heads on its outputs; mlp: on the observation, the policy and value MLPs on its outputs). Its state is kept per env slot where inference runs, zeroed at each episode's start and when a slot changes hands; it is not checkpointed (a resumed run starts from zero state). Each collector process and each learner rank keeps the state of its own env slots; with run.policy_lag the state is kept when newer weights start to serve mid-episode, and the update replays each sequence from the state the acting weights had; see ppo.bptt")
    core_size: Annotated[int, Field(ge=0, le=65_536)] = 0
    """model.core lstm / gru: the core's width (an LSTM keeps 2 x this many floats of state per env slot, a GRU this many); 0: 256 on images, 64 on vectors"""


class NormalizeConfig(BaseModel):
    model_config = SCHEMA

    obs: bool = False
    """running mean/std observation normalization, clipped to [-clip, clip] (vector observations; refused for uint8 images)"""
    reward: bool = False
    """scale rewards by the std of the discounted return, clipped to [-clip, clip]"""
    value: bool = False
    """value normalization (rl_games): the critic learns returns standardized by their running mean/std; its outputs are de-normalized for GAE and bootstrapping"""
    clip: Positive = 10.0
    """clip bound for normalized observations and scaled rewards"""


class LogConfig(BaseModel):
    model_config = SCHEMA

    keep_checkpoints: Count = 3
    """newest checkpoints kept (plus best.pt, the best by smoothed return)"""
    tensorboard: bool = True
    """write TensorBoard event files into RUN_DIR/tb"""
    track: bool = False
    """also log to Weights & Biases (needs wandb installed)"""
    wandb_project: str = "ppo-cluster"
    """Weights & Biases project name"""
    progress_bar: bool = True
    """a live progress bar when stdout is a terminal"""


class EvalConfig(BaseModel):
    model_config = SCHEMA

    every: EveryUpdates = 0
    """play evaluation episodes every this many updates (0: no evaluation during training)"""
    episodes: Count = 5
    """episodes per evaluation"""
    greedy: bool = False
    """evaluate with the most likely action instead of sampling"""
    video_every: EveryUpdates = 0
    """record a video every this many updates into RUN_DIR/videos (0: never)"""
    sticky_actions: SameOrUnit = -1.0
    """evaluation sticky-action probability (-1: same as training)"""


class Config(BaseModel):
    model_config = SCHEMA

    run: RunConfig = RunConfig()
    env: EnvSettings = EnvSettings()
    cluster: ClusterConfig = ClusterConfig()
    ppo: PPOConfig = PPOConfig()
    model: ModelConfig = ModelConfig()
    normalize: NormalizeConfig = NormalizeConfig()
    log: LogConfig = LogConfig()
    eval: EvalConfig = EvalConfig()

    @property
    def num_envs(self) -> int:
        actors, envs_per_actor = topology(self.cluster)
        return actors * envs_per_actor

    def to_dict(self) -> dict:
        """Plain dicts of scalars (checkpoints store it; torch.load(weights_only=True) reads it back)."""
        return self.model_dump()


def sections() -> dict[str, type[BaseModel]]:
    """{TOML section name: its model}, in the schema's order."""
    return {name: info.annotation for name, info in Config.model_fields.items()}


def from_dict(data: dict, base: Config | None = None) -> Config:
    """`base` (default: the defaults) with the sections of `data` laid over it, validated as one: each key's
    type, bounds and choices by the model, then the rules between keys (validate)."""
    if not isinstance(data, dict):
        raise ConfigError("config: expected a table of sections")
    merged = (base or Config()).model_dump()
    for name, table in data.items():
        both = isinstance(table, dict) and isinstance(merged.get(name), dict)
        merged[name] = {**merged[name], **table} if both else table
    try:
        cfg = Config.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(one_line(exc)) from None
    validate(cfg)
    return cfg


def one_line(exc: ValidationError) -> str:
    """A ValidationError of Config as one line: the first error (naming section.key, the value and the rule),
    and how many more there were."""
    errors = exc.errors()
    error, loc = errors[0], errors[0]["loc"]
    if len(loc) == 1 and error["type"] == "extra_forbidden":
        line = f"unknown config section [{loc[0]}] (known: {', '.join(Config.model_fields)})"
    elif len(loc) == 1:
        line = f"[{loc[0]}] must be a table, got {error['input']!r}"
    elif error["type"] == "extra_forbidden":
        line = f"unknown config key {'.'.join(map(str, loc))}"
    else:
        line = describe(error, Config)
    return line + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")


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


def with_topology(cfg: "Config", cores: int | None = None) -> "Config":
    """cfg with actors and envs_per_actor chosen (what launch.py starts, and what config.toml records)."""
    actors, per = topology(cfg.cluster, cores)
    return cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"actors": actors, "envs_per_actor": per})})


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
    """(section.key, default, doc) for every config key, in the schema's order; the doc is the docstring under
    the field (pydantic's FieldInfo.description)."""
    return [(f"{name}.{key}", info.get_default(call_default_factory=True), info.description or "")
            for name, model in sections().items() for key, info in model.model_fields.items()]
