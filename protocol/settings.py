"""The environment recipe the learner hands every actor at handshake (the config's [env] section), and the
schema machinery it shares with the learner's config (learner/config.py): a pydantic model's rules declared on
its fields, and one line naming the key, the value and the rule for a value that breaks one."""
from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Annotated, Callable, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

# unknown keys refused, no coercion (no "4" for 4, no true for 1; an int is still a float), floats finite,
# each field's attribute docstring its documentation (FieldInfo.description)
SCHEMA = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)


@dataclass(frozen=True)
class Rule:
    """A field's rule that bounds and choices cannot say: `words` (after "must be") for the error line and the
    docs, `ok` the test. Used as Annotated[T, AfterValidator(Rule(...))] (BeforeValidator: ahead of T's own checks)."""
    words: str
    ok: Callable[[object], bool]

    def __call__(self, value):
        if not self.ok(value):
            raise ValueError(self.words)
        return value


def _num(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def rule(info: FieldInfo) -> str:
    """What a field accepts beyond its type, in words after "must be" ('' when anything of the type is fine):
    its Rule, its choices (Literal) or its bounds (Field(ge=, gt=, le=, lt=))."""
    for item in info.metadata:
        if isinstance(item, (AfterValidator, BeforeValidator)) and isinstance(item.func, Rule):
            return item.func.words
    if typing.get_origin(info.annotation) is typing.Literal:
        return _or([str(choice) for choice in typing.get_args(info.annotation)])
    bound = {name: getattr(item, name) for item in info.metadata for name in ("ge", "gt", "le", "lt")
             if getattr(item, name, None) is not None}
    low, high = bound.get("ge", bound.get("gt")), bound.get("le", bound.get("lt"))
    if "ge" in bound and "le" in bound:
        return f"{_num(low)} or {_num(high)}" if info.annotation is int and high - low == 1 else \
            f"in [{_num(low)}, {_num(high)}]"
    words = [f"{'>=' if 'ge' in bound else '>'} {_num(low)}"] if low is not None else []
    words += [f"{'<=' if 'le' in bound else '<'} {_num(high)}"] if high is not None else []
    return " and ".join(words)


def type_name(info: FieldInfo) -> str:
    """The field's type as a user writes it in TOML: int, float, bool or str (a Literal: the choices' type; a
    union: its members', e.g. 'int or str')."""
    kind = info.annotation
    if typing.get_origin(kind) is typing.Literal:
        kind = type(typing.get_args(kind)[0])
    if isinstance(kind, types.UnionType):
        return " or ".join(member.__name__ for member in typing.get_args(kind))
    return getattr(kind, "__name__", str(kind))


def locate(model: type[BaseModel], loc: tuple) -> tuple[str, FieldInfo | None]:
    """The dotted key an error's location names, and the field there (None: no such field)."""
    info = None
    for name in loc:
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        info = fields.get(name)
        model = info.annotation if info is not None else None
    return ".".join(str(part) for part in loc), info


def describe(error: dict, model: type[BaseModel], prefix: str = "") -> str:
    """One line for one of pydantic's errors (ValidationError.errors()): the key, the value and the rule."""
    key, info = locate(model, error["loc"])
    key, kind, value = prefix + key, error["type"], error["input"]
    if kind == "extra_forbidden":
        return f"unknown key {key}"
    if info is None:
        return f"{key}: {error['msg']}"
    if info.annotation is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)  # the float the key would have held
    if kind == "finite_number":
        return f"{key} must be a finite number, got {value!r}"
    if kind.endswith("_type"):
        return f"{key}: expected {type_name(info)}, got {value!r}"
    if rule(info):
        return f"{key} must be {rule(info)}, got {value!r}"
    return f"{key}: {error['msg']}, got {value!r}"


def first_error(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """The first error of a validation as one line, saying how many more there were."""
    errors = exc.errors()
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return describe(errors[0], model, prefix) + more


Frames = Annotated[int, Field(ge=1, le=100)]
NonBlank = Annotated[str, AfterValidator(Rule("non-empty", lambda text: bool(text.strip())))]


# The [env] keys an actor of each protocol version knows (messages.PROTOCOL_VERSION). An actor refuses a Welcome
# with a key it does not know, so a key added to EnvSettings is a new protocol version: add the keys under the
# next number (the entries before it stay as they were) and bump PROTOCOL_VERSION; until both agree,
# tests/protocol/test_spaces_settings.py fails. An actor of another version is then refused at its handshake
# with a line naming both versions, not with an unknown key.
ENV_KEYS_OF_VERSION = {
    1: ("env_id", "noop_max", "frame_skip", "episodic_life", "fire_reset", "clip_rewards", "frame_stack",
        "resolution", "sticky_actions", "max_episode_steps", "full_action_space"),
    2: ("env_id", "noop_max", "frame_skip", "episodic_life", "fire_reset", "clip_rewards", "frame_stack",
        "resolution", "sticky_actions", "max_episode_steps", "full_action_space", "observe"),
}
# what env.observe = "positions" keeps of each classic-control task's observation: its positions and angles,
# without the velocities (the partially observed tasks of SB3-contrib's "NoVel" envs); the actor applies it
POSITIONS = {"CartPole": (0, 2), "Pendulum": (0, 1), "MountainCar": (0,), "MountainCarContinuous": (0,),
             "Acrobot": (0, 1, 2, 3)}


def task_name(env_id: str) -> str:
    """A gymnasium id's name without namespace and version: 'CartPole' for 'CartPole-v1'."""
    return env_id.rpartition("/")[2].rpartition("-v")[0] or env_id


class EnvSettings(BaseModel):
    model_config = SCHEMA

    env_id: NonBlank = "ALE/Breakout-v5"
    """gymnasium id; ALE ids get the Atari recipe below, any other id is used as registered"""
    noop_max: Annotated[int, Field(ge=0, le=1000)] = 30
    """Atari: up to this many random no-ops on reset (0 disables)"""
    frame_skip: Frames = 4
    """Atari: repeat each action this many frames, observe the max of the last two"""
    episodic_life: bool = True
    """Atari: a lost life ends the training episode; the game resets only on game over"""
    fire_reset: bool = True
    """Atari: press FIRE on reset (and after a lost life) in games that wait for it"""
    clip_rewards: bool = True
    """Atari: train on sign(reward); logged returns stay raw"""
    frame_stack: Annotated[int, Field(ge=1, le=16)] = 4
    """Atari: stack this many frames (1 disables)"""
    resolution: Annotated[int, Field(ge=8, le=512)] = 84
    """Atari: observations are resolution x resolution grayscale"""
    sticky_actions: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """Atari: probability of repeating the previous action (Machado et al.: 0.25)"""
    max_episode_steps: Annotated[int, Field(ge=0, le=2**31 - 1)] = 27000
    """agent steps before an episode is truncated (Atari: 108,000 frames); 0 keeps the env's own limit"""
    full_action_space: bool = False
    """Atari: all 18 actions instead of the game's minimal set"""
    observe: Literal["all", "positions"] = "all"
    """all: the env's whole observation | positions: without its velocities, a partially observed task that a feed-forward policy cannot solve and a recurrent one (model.core) can (CartPole: cart position and pole angle; also Pendulum, MountainCar, MountainCarContinuous, Acrobot)"""

    def to_dict(self) -> dict:
        return self.model_dump()

    @classmethod
    def from_dict(cls, data: dict) -> "EnvSettings":
        """The learner's settings as they arrive in a Welcome: every key known, of its type and within its
        bounds, or a ProtocolError naming the first that is not (env.KEY)."""
        from protocol.errors import ProtocolError
        unknown = sorted(set(data) - set(cls.model_fields))
        if unknown:
            raise ProtocolError(f"env settings: unknown key(s) {unknown}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ProtocolError(f"env settings: {first_error(exc, cls, 'env.')}") from None

    @property
    def is_atari(self) -> bool:
        return self.env_id.startswith("ALE/") or "NoFrameskip" in self.env_id
