"""Every validation rule of learner/config.py and learner/config_rules.py, one row each (issue 32, point 5): a value
that breaks it is refused with one line naming the key, the value and the rule. Removing any one rule makes a
row here fail (checked for all 73 rule calls by replacing each with `pass` in turn; see the issue-32 report).
Since issue 33 each key's own bounds and choices are declared on its field: the tests after RULES walk the
schema, so a new field's rule is tested the day it is declared."""
from __future__ import annotations

import math
import typing
from pathlib import Path

import pytest

from learner.config import Config, ConfigError, apply_overrides, from_dict, load, parse_override, sections
from learner.config_rules import check_multi_rank

BIG = 2**70
RULES = [  # (overrides, words the one-line message must contain)
    # every float finite (issue 32: learning_rate=inf, ent_coef=inf, watchdog_s=inf crashed later)
    (["ppo.learning_rate=inf"], ["ppo.learning_rate", "finite", "inf"]),
    (["ppo.ent_coef=inf"], ["ppo.ent_coef", "finite"]),
    (["run.watchdog_s=inf"], ["run.watchdog_s", "finite"]),
    (["ppo.gamma=nan"], ["ppo.gamma", "finite", "nan"]),
    (["cluster.actor_timeout_s=-inf"], ["cluster.actor_timeout_s", "finite"]),
    # [run]
    ([f"run.seed={BIG}"], ["run.seed", "[0, 4294967295]", str(BIG)]),
    (["run.seed=-1"], ["run.seed", "-1"]),
    (["run.total_steps=0"], ["run.total_steps", "got 0"]),
    ([f"run.total_steps={BIG}"], ["run.total_steps", str(BIG)]),
    (["run.device='tpu'"], ["run.device", "auto, cpu or cuda", "tpu"]),
    (["run.checkpoint_every=0"], ["run.checkpoint_every", "got 0"]),
    (["run.policy_lag=2"], ["run.policy_lag", "0 or 1", "2"]),
    (["run.torch_threads=-1"], ["run.torch_threads", "-1"]),
    (["run.torch_threads=100000"], ["run.torch_threads", "100000"]),
    (["run.watchdog_s=0.5"], ["run.watchdog_s", "[1, ", "0.5"]),
    (["run.watchdog_s=1e9"], ["run.watchdog_s", "1000000000.0"]),
    # [cluster] topology
    (["cluster.actors=-2"], ["cluster.actors", ">= -1", "-2"]),
    (["cluster.actors=5000"], ["cluster.actors x cluster.envs_per_actor = 5000 env slots"]),
    (["cluster.envs_per_actor=5000"], ["cluster.envs_per_actor", "[0, 4096]", "5000"]),
    (["cluster.groups=9"], ["cluster.groups", "in [1, 8] or 'auto'", "9"]),
    (["cluster.groups=auto", "run.deterministic=true"], ["cluster.groups = 'auto'", "deterministic runs"]),
    (["cluster.envs=0"], ["cluster.envs", "[1, 4096]", "0"]),
    (["cluster.actors=100", "cluster.envs_per_actor=100"], ["10000 env slots", "4096"]),
    (["cluster.min_envs=5000"], ["cluster.min_envs", "5000"]),
    (["cluster.learners=0"], ["cluster.learners", "[1, 64]", "0"]),
    (["cluster.collectors=65"], ["cluster.collectors", "[0, 64]", "65"]),
    (["cluster.collectors=2", "run.deterministic=true"], ["cluster.collectors = 2", "deterministic"]),
    (["cluster.collectors=2", "normalize.obs=true"], ["cluster.collectors = 2", "normalize.obs"]),
    (["cluster.learners=2", "normalize.reward=true"], ["normalize.reward", "cluster.learners = 2"]),
    # [cluster] addresses (issue 32: a weights port of 99999 was silently changed)
    (["cluster.address='udp://x'"], ["cluster.address", "tcp://", "udp://x"]),
    (["cluster.weights_address='udp://x'"], ["cluster.weights_address", "tcp://", "udp://x"]),
    (["cluster.weights_address='tcp://127.0.0.1:99999'"], ["cluster.weights_address", "[0, 65535]", "99999"]),
    (["cluster.address='tcp://127.0.0.1:-5'"], ["cluster.address", "[0, 65535]", "-5"]),
    (["cluster.address='tcp://127.0.0.1'"], ["cluster.address", "HOST:PORT", "tcp://127.0.0.1"]),
    (["cluster.advertise_host='0.0.0.0'"], ["cluster.advertise_host", "wildcard", "0.0.0.0"]),
    (["cluster.address='tcp://127.0.0.1:5555'", "cluster.weights_address='tcp://127.0.0.1:5555'"],
     ["cluster.address and cluster.weights_address must differ"]),
    (["cluster.server_key='k'"], ["cluster.server_key and cluster.allowed_keys go together"]),
    (["cluster.client_key='k'"], ["cluster.client_key needs cluster.server_key"]),
    (["cluster.address='tcp://0.0.0.0:0'"], ["cluster.address", "beyond loopback", "CURVE"]),
    # [cluster] limits (issue 32: actor_timeout_s=1e-9 was accepted)
    (["cluster.actor_timeout_s=1e-9"], ["cluster.actor_timeout_s", "[1, 86400]", "1e-09"]),
    (["cluster.actor_timeout_s=1e6"], ["cluster.actor_timeout_s", "1000000.0"]),
    (["cluster.startup_timeout_s=-1"], ["cluster.startup_timeout_s", "-1"]),
    (["cluster.startup_timeout_s=1e9"], ["cluster.startup_timeout_s", "1000000000.0"]),
    (["cluster.collective_timeout_s=0"], ["cluster.collective_timeout_s", "> 0", "0.0"]),
    (["cluster.collective_timeout_s=1e9"], ["cluster.collective_timeout_s", "1000000000.0"]),
    (["cluster.max_message_mb=0"], ["cluster.max_message_mb", "[1, 4096]", "0"]),
    (["cluster.codec=gzip"], ["cluster.codec", "auto, none", "'gzip'"]),
    (["cluster.memory_budget_mb=-1"], ["cluster.memory_budget_mb", ">= 0", "-1"]),
    (["cluster.max_envs_per_actor=-1"], ["cluster.max_envs_per_actor", "-1"]),
    (["cluster.max_envs_per_actor=100000"], ["cluster.max_envs_per_actor", "100000"]),
    # [ppo] (issue 32: num_steps=1e9 ran out of memory, num_minibatches=100000 was accepted)
    (["ppo.num_steps=0"], ["ppo.num_steps must be in [1, 4194304], got 0"]),
    (["ppo.num_steps=1000000000"], ["ppo.num_steps must be in [1, 4194304], got 1000000000"]),
    (["ppo.num_steps=1000000", "cluster.actors=8", "cluster.envs_per_actor=8"],
     ["ppo.num_steps x env slots", "64000000", "4194304"]),
    (["ppo.gamma=1.5"], ["ppo.gamma", "[0, 1]", "1.5"]),
    (["ppo.gae_lambda=-0.1"], ["ppo.gae_lambda", "[0, 1]", "-0.1"]),
    (["ppo.update_epochs=0"], ["ppo.update_epochs", "0"]),
    (["ppo.update_epochs=100000"], ["ppo.update_epochs", "100000"]),
    (["ppo.num_minibatches=0"], ["ppo.num_minibatches", "0"]),
    (["ppo.num_minibatches=100000", "ppo.num_steps=128", "cluster.actors=2", "cluster.envs_per_actor=4"],
     ["ppo.num_minibatches", "[1, 1024]", "100000"]),
    (["ppo.variant='ppg'"], ["ppo.variant", "clip or kl", "ppg"]),
    (["ppo.clip_coef=0"], ["ppo.clip_coef", "> 0", "0.0"]),
    (["ppo.clip_coef=100"], ["ppo.clip_coef", "100.0"]),
    (["ppo.vf_coef=-1"], ["ppo.vf_coef", "-1.0"]),
    (["ppo.vf_coef=1e9"], ["ppo.vf_coef", "1000000000.0"]),
    (["ppo.ent_coef=-0.01"], ["ppo.ent_coef", "-0.01"]),
    (["ppo.ent_coef=1e9"], ["ppo.ent_coef", "1000000000.0"]),
    (["ppo.kl_target=-1"], ["ppo.kl_target", "-1.0"]),
    (["ppo.target_kl=-1"], ["ppo.target_kl", "-1.0"]),
    (["ppo.max_grad_norm=0"], ["ppo.max_grad_norm", "0.0"]),
    (["ppo.kl_beta=0"], ["ppo.kl_beta", "0.0"]),
    # learning rate
    (["ppo.learning_rate=0"], ["ppo.learning_rate", "> 0", "0.0"]),
    (["ppo.learning_rate=5"], ["ppo.learning_rate", "<= 1", "5.0"]),
    (["ppo.lr_schedule='cosine'"], ["ppo.lr_schedule", "cosine"]),
    (["ppo.lr_min=0.1", "ppo.lr_max=0.01"], ["ppo.lr_min and ppo.lr_max", "0.1, 0.01"]),
    (["ppo.lr_max=2"], ["ppo.lr_max", "<= 1", "2.0"]),
    (["ppo.lr_schedule='adaptive'", "ppo.learning_rate=0.5"], ["ppo.learning_rate 0.5", "adaptive"]),
    (["ppo.lr_adapt_every='update'"], ["ppo.lr_adapt_every", "update"]),
    (["ppo.lr_anneal_steps=-1"], ["ppo.lr_anneal_steps", "-1"]),
    (["ppo.lr_schedule='adaptive'", "ppo.lr_anneal_steps=1000"], ["ppo.lr_anneal_steps 1000", "adaptive"]),
    (["ppo.anneal_lr=false", "ppo.lr_anneal_steps=1000"], ["ppo.lr_anneal_steps 1000", "constant"]),
    (["ppo.ent_anneal_steps=-1"], ["ppo.ent_anneal_steps", "-1"]),
    (["ppo.ent_anneal_steps=1000"], ["ppo.ent_anneal_steps 1000", "constant"]),
    (["ppo.lr_kl_threshold=0"], ["ppo.lr_kl_threshold", "0.0"]),
    (["ppo.adam_eps=0"], ["ppo.adam_eps", "0.0"]),
    # [model], [normalize]
    (["model.kind='rnn'"], ["model.kind", "rnn"]),
    (["model.activation='tanh'"], ["model.activation", "tanh"]),
    (["model.hidden=0"], ["model.hidden", "0"]),
    (["model.hidden=1000000"], ["model.hidden", "1000000"]),
    (["normalize.clip=0"], ["normalize.clip", "0.0"]),
    # [log], [eval]
    (["log.keep_checkpoints=0"], ["log.keep_checkpoints", "0"]),
    (["eval.every=-1"], ["eval.every", "-1"]),
    (["eval.video_every=-1"], ["eval.video_every", "-1"]),
    (["eval.episodes=0"], ["eval.episodes", "0"]),
    (["eval.sticky_actions=2"], ["eval.sticky_actions", "2.0"]),
    (["eval.sticky_actions=-0.5"], ["eval.sticky_actions", "-1 or in [0, 1]", "-0.5"]),
    # [model] core (issue 63): its sequences must fit the rollout
    (["model.core='rnn'"], ["model.core", "none, lstm or gru", "rnn"]),
    (["model.core='lstm'", "ppo.num_steps=128", "ppo.bptt=48"], ["ppo.bptt", "divide", "48", "128"]),
    (["model.core='lstm'", "cluster.envs=2", "cluster.actors=1", "ppo.bptt=0", "ppo.num_minibatches=4"],
     ["ppo.num_minibatches", "[1, 2]", "whole sequences", "got 4"]),
    # [env]
    (["env.observe='velocities'"], ["env.observe", "all or positions", "velocities"]),
    (["env.observe='positions'"], ["env.observe = 'positions'", "CartPole", "ALE/Breakout-v5"]),
    (["env.env_id='LunarLander-v3'", "env.observe='positions'"], ["env.observe", "LunarLander-v3"]),
    (["env.env_id=''"], ["env.env_id", "empty"]),
    (["env.env_id='  '"], ["env.env_id", "empty", "'  '"]),
    (["env.noop_max=-1"], ["env.noop_max", "-1"]),
    (["env.frame_skip=0"], ["env.frame_skip", "0"]),
    (["env.frame_stack=17"], ["env.frame_stack", "17"]),
    (["env.resolution=4"], ["env.resolution", "4"]),
    (["env.sticky_actions=1.5"], ["env.sticky_actions", "1.5"]),
    (["env.max_episode_steps=-1"], ["env.max_episode_steps", "-1"]),
    # types, names, syntax
    (["ppo.clip_coef=abc"], ["ppo.clip_coef", "expected float", "abc"]),
    (["run.seed=1.5"], ["run.seed", "expected int", "1.5"]),
    (["run.seed=true"], ["run.seed", "expected int", "True"]),
    (["run.seed='3'"], ["run.seed", "expected int", "'3'"]),
    (["ppo.gamma=true"], ["ppo.gamma", "expected float", "True"]),
    (["run.deterministic=1"], ["run.deterministic", "expected bool", "1"]),
    (["env.env_id=3"], ["env.env_id", "expected str", "3"]),
    (["run.seed=-1", "ppo.gamma=2"], ["run.seed", "-1", "(+1 more)"]),
    (["ppo.gamma.x=1"], ["section.key=value"]),
    (["ppo.no_such_key=1"], ["unknown config key ppo.no_such_key"]),
    (["nope.key=1"], ["unknown config section [nope]"]),
    (["oops"], ["--set 'oops'", "section.key=value"]),
    (["=1"], ["section.key=value"]),
    (["ppo.=1"], ["section.key=value"]),
    (["a.b.c=1"], ["section.key=value"]),
    (["ppo.gamma=0.9\nppo.lam=1"], ["one line"]),
]


@pytest.mark.parametrize("overrides, words", RULES, ids=[" ".join(o)[:60] for o, _ in RULES])
def test_every_rule_refuses_in_one_line_naming_key_value_and_rule(overrides, words):
    with pytest.raises(ConfigError) as caught:
        apply_overrides(Config(), overrides)
    message = str(caught.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, (word, message)


def test_the_defaults_pass():
    apply_overrides(Config(), ["run.seed=0"])


def test_a_recurrent_core_with_sequences_that_fit_passes():
    cfg = apply_overrides(Config(), ["model.core='gru'", "ppo.num_steps=128", "ppo.bptt=32", "ppo.num_minibatches=32"])
    assert (cfg.model.core, cfg.ppo.bptt) == ("gru", 32)  # 8 env slots x 4 sequences each: 32 sequences


@pytest.mark.parametrize("where", [["run.policy_lag=1"], ["cluster.collectors=2"], ["cluster.learners=2"],
                                   ["run.policy_lag=1", "cluster.collectors=2", "cluster.learners=2"]])
def test_a_recurrent_core_goes_with_policy_lag_collector_processes_and_ranks(where):
    """Issue 63, point 5: each collector process and each rank keeps its own slots' state, and under lag the
    update replays from the acting policy's states (once refused, naming the keys)."""
    cfg = apply_overrides(Config(), ["model.core='lstm'", *where])
    check_multi_rank(cfg, "2 learner ranks")  # what preflight asks of a job torchrun started
    assert cfg.model.core == "lstm"


@pytest.mark.parametrize("recipe", ["cartpole.toml", "pong-fast.toml", "breakout-fast.toml"])
def test_policy_lag_is_accepted_with_value_normalization(recipe):
    """Issue 40: the lagged policy serves a snapshot of the value statistics (learner.collection.inference
    served_modules), so lag and value normalization go together, in the fast recipes too."""
    cfg = load(Path(__file__).resolve().parents[2] / "configs" / recipe, ["run.policy_lag=1", "normalize.value=true"])
    assert cfg.run.policy_lag == 1 and cfg.normalize.value


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfe[\x00r\x00u\x00n\x00]\x00", ["not UTF-8", "0xff", "offset 0"]),  # UTF-16
    (b"[run]\nseed = 1\nname = '\xe9t\xe9'\n", ["not UTF-8", "0xe9"]),  # Latin-1
    (b"[run\nseed = 1\n", ["not valid TOML"]),
    (b"[run]\nseed = 1\nseed = 2\n", ["not valid TOML"]),
    (b"run = 3\n", ["[run] must be a table"]),
    (b"[ppo]\nlearning_rate = inf\n", ["ppo.learning_rate", "finite"]),
])
def test_config_files_in_any_form_are_one_line(tmp_path, content, words):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert "\n" not in str(caught.value) and all(w in str(caught.value) for w in words), str(caught.value)


def test_a_utf8_file_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes("\ufeff[run]\nseed = 7\n".encode())
    assert load(path).run.seed == 7


def test_a_directory_or_a_missing_file_as_config_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, not a config file"):
        load(tmp_path)
    with pytest.raises(ConfigError, match="config file not found"):
        load(tmp_path / "missing.toml")


def test_override_values_are_read_as_toml_else_as_a_bare_string():
    assert parse_override("env.env_id=ALE/Pong-v5") == ("env", "env_id", "ALE/Pong-v5")
    assert parse_override("ppo.gamma = 0.9") == ("ppo", "gamma", 0.9)


# ------------------------------------------------------------------------- rules declared on the fields

def fields():
    """(section.key, FieldInfo) for every config key."""
    return [(f"{name}.{key}", info) for name, model in sections().items() for key, info in model.model_fields.items()]


def bounds(info) -> dict[str, float]:
    return {name: getattr(item, name) for item in info.metadata for name in ("ge", "gt", "le", "lt")
            if getattr(item, name, None) is not None}


def outside_and_inside(info):
    """[(a value just outside one bound, a value just inside it)] for each bound of a numeric field."""
    step = (lambda x, d: x + d) if info.annotation is int else (lambda x, d: math.nextafter(x, d * math.inf))
    out = []
    for name, edge in bounds(info).items():
        d = -1 if name in ("ge", "gt") else 1
        out.append((step(edge, d), edge) if name in ("ge", "le") else (edge, step(edge, -d)))
    return out


def refuses(key: str, value) -> str:
    section, name = key.split(".")
    with pytest.raises(ConfigError) as caught:
        from_dict({section: {name: value}})
    message = str(caught.value)
    assert "\n" not in message and message.startswith(key), message
    return message


def accepts(key: str, value) -> None:
    """The field's own rule lets `value` through (the rules between keys are RULES' business)."""
    section, name = key.split(".")
    assert getattr(sections()[section].model_validate({name: value}), name) == value


NUMERIC = [(key, info) for key, info in fields() if info.annotation in (int, float)]
BOUNDED = [(key, info, out, inside) for key, info in NUMERIC for out, inside in outside_and_inside(info)]
CHOICES = [(key, info) for key, info in fields() if typing.get_origin(info.annotation) is typing.Literal]
FLOATS = [key for key, info in fields() if info.annotation is float]


def test_every_numeric_key_declares_a_rule():
    """A number without bounds is how issue 32's crashes came in (num_steps=1e9, actor_timeout_s=1e-9)."""
    from protocol.settings import rule
    assert [key for key, info in NUMERIC if not rule(info)] == []
    assert len(BOUNDED) > 60 and len(CHOICES) >= 7 and len(FLOATS) > 20


@pytest.mark.parametrize("key, info, outside, inside", BOUNDED, ids=[f"{k}={o!r}" for k, _, o, _ in BOUNDED])
def test_every_bound_refuses_the_value_just_outside_and_takes_the_one_inside(key, info, outside, inside):
    message = refuses(key, outside)
    shown = float(outside) if info.annotation is float else outside
    assert f"got {shown!r}" in message, message
    accepts(key, inside)


@pytest.mark.parametrize("key, info", CHOICES, ids=[k for k, _ in CHOICES])
def test_every_choice_key_refuses_an_unlisted_value_and_names_the_choices(key, info):
    choices = typing.get_args(info.annotation)
    message = refuses(key, "not-a-choice")
    assert "'not-a-choice'" in message and all(str(c) in message for c in choices), message
    for choice in choices:
        accepts(key, choice)


@pytest.mark.parametrize("key", FLOATS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_every_float_key_refuses_nan_and_infinities(key, value):
    assert "must be a finite number" in refuses(key, value)


def within(info, value) -> bool:
    b = bounds(info)
    return (b.get("ge", -math.inf) <= value <= b.get("le", math.inf)
            and b.get("gt", -math.inf) < value < b.get("lt", math.inf))


@pytest.mark.parametrize("key", FLOATS)
def test_every_float_key_takes_an_int_and_holds_a_float(key):
    section, name = key.split(".")
    info = sections()[section].model_fields[name]
    value = next(v for v in (1, 0, 10, 100) if within(info, v))
    held = getattr(sections()[section].model_validate({name: value}), name)
    assert held == value and type(held) is float


@pytest.mark.parametrize("key", [key for key, info in NUMERIC])
def test_every_numeric_key_refuses_a_bool_and_a_quoted_number(key):
    assert "expected" in refuses(key, True)
    assert "expected" in refuses(key, "1")
