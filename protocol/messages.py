"""The messages actors and the learner exchange, as dataclasses, with their encoding and validation, and
TABLE: each type's direction, the states it is in turn in and its handler, which every receiver dispatches by.

Data path: Handshake -> Welcome, Starting while the actor builds its envs, then StepReport -> Actions
repeatedly, Goodbye from either side.
Weights go out on the publish socket. `decode(frames, expect=...)` checks every field, and every array's
dtype and shape against what the handshake agreed (an `Expect`), and raises ProtocolError otherwise.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from protocol import codec, compression
from protocol.errors import ProtocolError
from protocol.spaces import SpaceSpec
from protocol.usual_step import usual_step, within

PROTOCOL_VERSION = 2
MAX_ENV_SLOTS = 4096  # env slots one actor may host, and one learner serves (admission, registry, config)
FLOAT32_MAX = float(np.finfo(np.float32).max)  # the default bound of a report's numbers: past it float32 is inf
MAX_GROUPS = 8  # env groups one actor may step in turn (actor/group_count.py chooses up to this many)
_NONE = (codec.EMPTY[codec.DTYPES["float64"]], codec.EMPTY[codec.DTYPES["int64"]])  # no episode ended, no env cut


@dataclass
class Handshake:
    """Actor -> learner: who I am and what I host. env_id/spaces may be None: 'whatever you run'."""
    num_envs: int
    name: str = ""
    env_id: str | None = None
    obs_space: SpaceSpec | None = None
    action_space: SpaceSpec | None = None
    groups: int = 1
    """env groups stepped in turn (while one waits for actions, another steps); each group reports on its own"""
    codecs: list[str] | None = None
    """the frame codecs this actor can send (protocol/compression.py); None (older actors): raw frames only"""


@dataclass
class Welcome:
    """Learner -> actor: the slots assigned and what the actor needs to build and seed its envs."""
    actor_id: int
    slots: list[int]
    seeds: list[int]
    env: dict
    obs_space: SpaceSpec
    action_space: SpaceSpec
    run_id: str = ""
    codec: str = compression.NONE
    """the codec picked from the actor's offer for its step reports' frames (absent from older learners: none)"""


@dataclass
class Starting:
    """Actor -> learner between its Welcome and its first step reports: still building (or resetting) its
    envs, `built` of `total` done. A sign of life, so start-up time is never taken for silence."""
    built: int
    total: int


@dataclass
class StepReport:
    """Actor -> learner: one group's envs after a step (or after the first reset, when first=True).

    final_obs holds the last observation of the envs in final_index that were truncated (for
    bootstrapping); obs then already holds their reset observation.
    """
    group: int
    obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episode_returns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    episode_lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    final_index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    final_obs: np.ndarray | None = None
    first: bool = False


@dataclass
class Actions:
    """Learner -> actor: the actions for one group, computed with weights `version`."""
    group: int
    actions: np.ndarray
    version: int = 0


@dataclass
class Weights:
    """Learner -> subscribers: the policy's tensors after update `version`."""
    version: int
    tensors: dict[str, np.ndarray]


@dataclass
class Goodbye:
    reason: str = ""


@dataclass
class Error:
    """A refusal, with its reason. rejoin=True: "you were retired (or are unknown here); hand-shake
    again", as opposed to a refusal that retrying would not change."""
    reason: str = ""
    rejoin: bool = False


@dataclass
class Redirect:
    """Learner rank 0 -> a joining actor: join the learner rank at `address` instead (it has the fewest
    live env slots), so users name one address for a multi-rank job."""
    address: str
    reason: str = ""


@dataclass
class Expect:
    """What a peer agreed to at handshake; decode() checks step reports and actions against it."""
    group_size: int
    groups: int
    obs_shape: tuple[int, ...]
    obs_dtype: str
    action_shape: tuple[int, ...] = ()
    action_dtype: str = "int64"
    max_bytes: int = codec.DEFAULT_MAX_BYTES
    frames: compression.Receiver | None = None
    """the learner's decoder of this actor's compressed frames (None: raw frames, as agreed)"""
    max_abs_reward: float = FLOAT32_MAX
    """the largest |reward| a step report may carry (the learner's cluster.max_abs_reward); NaN and inf never pass"""
    max_abs_obs: float = FLOAT32_MAX
    """the same for a float observation's every element (cluster.max_abs_obs)"""


# Who takes a message, and in which of its states: the learner's view of an actor (its gateway decides), or an
# actor's view of its learner, or a subscriber of the weights.
GATEWAY, COLLECTOR, ACTOR, SUBSCRIBER = "gateway", "collector", "actor", "subscriber"
UNREGISTERED, BUILDING, RUNNING = "unregistered", "building", "running"  # an actor: not joined; welcomed, some group
                                                                         # without its first report; all reporting
JOINING, PREPARING, SERVING = "joining", "preparing", "serving"  # an actor's learner: handshake sent; welcomed,
                                                                 # envs being built; stepping on its actions
FOLLOWING = "following"  # a subscriber, between weight broadcasts
LEARNER = frozenset({GATEWAY, COLLECTOR})  # the parts that take what an actor sends
STATES = (frozenset({UNREGISTERED, BUILDING, RUNNING}), frozenset({JOINING, PREPARING, SERVING}),
          frozenset({FOLLOWING}))  # each receiver's own


@dataclass(frozen=True)
class Route:
    """One message type: its name on the wire, its class, the parts that take it (learner/gateway/gateway.py's
    Gateway, learner/collection/collector.py's Collector, actor/runner.py's Session, the eval worker), the
    receiver's states in which it is in turn, and the receiver's method that handles it. A message a receiver
    does not take, or takes in other states, is refused by name (a learner: logged, counted, the sender
    retired; an actor: logged, dropped); a type not in the table is a ProtocolError at decode."""
    name: str
    cls: type
    by: frozenset[str]
    when: frozenset[str]
    handler: str


def _route(name: str, cls: type, by: tuple[str, ...], when: set[str], handler: str) -> Route:
    return Route(name, cls, frozenset(by), frozenset(when), handler)


# a message type = one row here, its handler on each part in `by`, and its body's builder in _BUILDERS below
TABLE = (
    #       type          class        taken by              in turn while (the receiver's view)      handler
    _route("handshake",  Handshake,   (GATEWAY,),           {UNREGISTERED, BUILDING, RUNNING},        "on_handshake"),
    _route("starting",   Starting,    (GATEWAY,),           {BUILDING},                               "on_starting"),
    _route("step",       StepReport,  (COLLECTOR,),         {BUILDING, RUNNING},                      "on_step"),
    _route("goodbye",    Goodbye,     (COLLECTOR, ACTOR),   {BUILDING, RUNNING, PREPARING, SERVING},  "on_goodbye"),
    _route("error",      Error,       (COLLECTOR, ACTOR),   {BUILDING, RUNNING, JOINING, PREPARING, SERVING}, "on_error"),
    _route("welcome",    Welcome,     (ACTOR,),             {JOINING},                                "on_welcome"),
    _route("redirect",   Redirect,    (ACTOR,),             {JOINING},                                "on_redirect"),
    _route("actions",    Actions,     (ACTOR,),             {SERVING},                                "on_actions"),
    _route("weights",    Weights,     (SUBSCRIBER,),        {FOLLOWING},                              "maybe_evaluate"),
)
ROUTES = {r.cls: r for r in TABLE}
TYPES = {r.name: r.cls for r in TABLE}
NAMES = {r.cls: r.name for r in TABLE}


def turns_for(parts: frozenset[str]) -> dict[type, frozenset[str]]:
    """{class: the states it is in turn in} for the types `parts` take: a receiver's lookup, made once (a
    message's check is then one dict lookup and one set membership)."""
    return {r.cls: r.when for r in TABLE if not r.by.isdisjoint(parts)}


def refusal_of(msg, parts: frozenset[str], state: str) -> str | None:
    """Why a receiver made of `parts` (the learner: LEARNER; an actor: {ACTOR}) may not take `msg` in `state`
    (None: it may), by the table, naming the message and what is wrong: its direction or its turn."""
    route = ROUTES[type(msg)]
    if route.by.isdisjoint(parts):
        return f"unexpected {route.cls.__name__}: only the {' or the '.join(sorted(route.by))} takes it"
    if state not in route.when:
        name = route.cls.__name__
        side = next((states for states in STATES if state in states), frozenset())
        return f"{name} while {state} (in turn while {' or '.join(sorted(route.when & side)) or 'never'})"
    return None


def encode(msg, sender: compression.Sender | None = None) -> list:
    """The frames of a message; a step report's observations compressed by `sender` when given."""
    name = NAMES.get(type(msg))
    if name is None:
        raise ProtocolError(f"cannot encode {type(msg).__name__}")
    if isinstance(msg, StepReport):
        arrays = {k: getattr(msg, k) for k in ("obs", "rewards", "terminated", "truncated", "episode_returns",
                                              "episode_lengths", "final_index")}
        if msg.final_obs is not None:
            arrays["final_obs"] = msg.final_obs
        body = {"group": msg.group, "first": msg.first}
        if sender is None:
            return codec.encode(PROTOCOL_VERSION, name, body, arrays)
        extra, packed = sender.pack(msg)
        return codec.encode(PROTOCOL_VERSION, name, {**body, **extra}, arrays, packed)
    if isinstance(msg, Actions):
        return codec.encode(PROTOCOL_VERSION, name, {"group": msg.group, "version": msg.version},
                            {"actions": msg.actions})
    if isinstance(msg, Weights):
        return codec.encode(PROTOCOL_VERSION, name, {"version": msg.version}, msg.tensors)
    body = {k: (v.to_dict() if isinstance(v, SpaceSpec) else v) for k, v in vars(msg).items()}
    return codec.encode(PROTOCOL_VERSION, name, body)


def encode_error_for(version: int, reason: str) -> list:
    """An Error (no rejoin) for a peer of another protocol version, whose handshake is refused: the header and
    the Error's body have this form in every version, so the peer reads why instead of failing on ours."""
    return codec.encode(version, "error", {"reason": reason, "rejoin": False})


def encode_actions(group: int, actions: np.ndarray, version: int) -> list:
    """encode(Actions(group, actions, version)), byte for byte, for the learner's hottest send: the header up
    to the inline action bytes is packed once per (group, version, dtype, shape), then only the bytes change."""
    if actions.nbytes > codec.INLINE_MAX_BYTES or not actions.flags.c_contiguous or not actions.dtype.isnative:
        return encode(Actions(group, actions, version))
    return [_actions_prefix(group, version, actions.dtype, actions.shape) + actions.tobytes()]


@functools.lru_cache(maxsize=16)
def _actions_prefix(group: int, version: int, dtype: np.dtype, shape: tuple) -> bytes:
    """The packed header of such an Actions message without its trailing action bytes (msgpack puts the inline
    bytes last: they are the last element of the last key's only array spec)."""
    placeholder = np.zeros(shape, dtype)
    (header,) = encode(Actions(group, placeholder, version))
    return header[:len(header) - placeholder.nbytes]


def decode(frames: list, expect: Expect | None = None, max_bytes: int = codec.DEFAULT_MAX_BYTES):
    if not frames:
        raise ProtocolError("empty message")
    name, body, specs = codec.decode_header(frames[0], PROTOCOL_VERSION)
    cls = TYPES.get(name)
    if cls is None:
        raise ProtocolError(f"unknown message type {name!r:.40}")
    if name != "step":
        return _decode_body(name, body, specs, frames, expect, max_bytes)
    receiver = expect.frames if expect is not None else None
    if receiver is None:
        if "z" in body:
            raise ProtocolError(f"step report compressed ({body['z']!r:.20}) though no codec was agreed")
        return _decode_step(body, specs, frames, expect, max_bytes)
    frames = [frames[0], *receiver.inflate(body, specs, frames[1:], expect.max_bytes)]  # exact declared sizes
    return receiver.restore(_decode_step(body, specs, frames, expect, max_bytes), body)


def _decode_step(body: dict, specs: list, frames: list, expect: Expect | None, max_bytes: int) -> StepReport:
    if expect is not None and (usual := usual_step(body, specs, frames[1:], expect)) is not None:
        group, first, obs, rewards, terminated, truncated = usual  # most reports: see protocol/usual_step.py
        return StepReport(group, obs, rewards, terminated, truncated, _NONE[0], _NONE[1], _NONE[1], first=first)
    return _decode_body("step", body, specs, frames, expect, max_bytes)


def _decode_body(name: str, body: dict, specs: list, frames: list, expect: Expect | None, max_bytes: int):
    try:
        arrays = codec.decode_arrays(specs, frames[1:], expect.max_bytes if expect else max_bytes)
        return _BUILDERS[name](body, arrays, expect)
    except ProtocolError as exc:
        exc.message_type = name  # the learner answers a refused handshake, and only that, with an Error
        raise


def _get(body: dict, key: str, kind, optional: bool = False):
    value = body.get(key)
    if value is None and optional:
        return None
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ProtocolError(f"field {key!r} must be {getattr(kind, '__name__', kind)}, got {value!r:.60}")
    return value


def printable(text: str, limit: int) -> str:
    """`text` without control characters (newlines, escapes, bidi overrides, line separators: what could forge a
    log line or rewrite a terminal), at most `limit` characters: names and reasons a peer sends are logged."""
    text = text[:4 * limit]
    return (text if text.isprintable() else "".join(c for c in text if c.isprintable()))[:limit]


def _no_arrays(arrays):
    if arrays:
        raise ProtocolError(f"unexpected arrays {sorted(arrays)[:4]}")


def _handshake(body, arrays, expect):
    _no_arrays(arrays)
    num_envs, groups = _get(body, "num_envs", int), _get(body, "groups", int)
    if not 1 <= num_envs <= MAX_ENV_SLOTS:
        raise ProtocolError(f"handshake: num_envs must be in [1, {MAX_ENV_SLOTS}], got {num_envs}")
    if not 1 <= groups <= MAX_GROUPS or num_envs % groups:
        raise ProtocolError(f"handshake: groups must be in [1, {MAX_GROUPS}] and divide num_envs, got {groups}")
    spaces = {k: None if body.get(k) is None else SpaceSpec.from_dict(body[k]) for k in ("obs_space", "action_space")}
    return Handshake(num_envs=num_envs, name=printable(_get(body, "name", str), 100), groups=groups,
                     env_id=_get(body, "env_id", str, optional=True),
                     codecs=compression.offered_codecs(body.get("codecs")), **spaces)


def _welcome(body, arrays, expect):
    _no_arrays(arrays)
    slots, seeds = _get(body, "slots", list), _get(body, "seeds", list)
    if not all(isinstance(x, int) for x in slots + seeds) or len(slots) != len(seeds):
        raise ProtocolError("welcome: slots and seeds must be int lists of equal length")
    return Welcome(actor_id=_get(body, "actor_id", int), slots=slots, seeds=seeds, env=_get(body, "env", dict),
                   obs_space=SpaceSpec.from_dict(body.get("obs_space")),
                   action_space=SpaceSpec.from_dict(body.get("action_space")), run_id=_get(body, "run_id", str),
                   codec=_get(body, "codec", str, optional=True) or compression.NONE)  # absent from older learners


def _check(arrays, name, dtype, shape):
    arr = arrays.get(name)
    if arr is None:
        raise ProtocolError(f"missing array {name!r}")
    if codec.DTYPE_NAMES.get(arr.dtype) != dtype:
        raise ProtocolError(f"array {name!r}: dtype {arr.dtype.name}, expected {dtype}")
    if shape is not None and arr.shape != shape:  # shape: a tuple, like arr.shape
        raise ProtocolError(f"array {name!r}: shape {arr.shape}, expected {shape}")
    return arr


def _group(body, expect):
    group = _get(body, "group", int)
    if expect is not None and not 0 <= group < expect.groups:
        raise ProtocolError(f"group {group} out of range [0, {expect.groups})")
    return group


def _step(body, arrays, expect):
    k = expect.group_size if expect else None
    obs_shape = (k, *expect.obs_shape) if expect else None
    obs = _check(arrays, "obs", expect.obs_dtype if expect else codec.DTYPE_NAMES.get(arrays.get("obs", np.zeros(0)).dtype), obs_shape)
    if obs.ndim == 0:
        raise ProtocolError("array 'obs': needs a leading env dimension")
    k = obs.shape[0] if k is None else k
    per_env = (k,)
    report = StepReport(
        group=_group(body, expect), obs=obs, first=bool(_get(body, "first", bool)),
        rewards=_check(arrays, "rewards", "float32", per_env),
        terminated=_check(arrays, "terminated", "bool", per_env),
        truncated=_check(arrays, "truncated", "bool", per_env),
        episode_returns=_check(arrays, "episode_returns", "float64", None),
        episode_lengths=_check(arrays, "episode_lengths", "int64", None),
        final_index=_check(arrays, "final_index", "int64", None),
        final_obs=arrays.get("final_obs"),
    )
    if min(report.episode_returns.ndim, report.episode_lengths.ndim, report.final_index.ndim) == 0:
        raise ProtocolError("step: episode_returns, episode_lengths and final_index must be 1-D")
    n_ep, n_final = len(report.episode_returns), len(report.final_index)
    if report.episode_returns.ndim != 1 or report.episode_lengths.shape != (n_ep,) or n_ep > k:
        raise ProtocolError("step: episode_returns and episode_lengths must be 1-D, equal length, at most one per env")
    if report.final_index.ndim != 1 or n_final > k or (n_final and not (0 <= report.final_index).all()) \
            or (n_final and not (report.final_index < k).all()):
        raise ProtocolError("step: final_index must hold env indices within the group")
    if n_final:
        _check(arrays, "final_obs", codec.DTYPE_NAMES[obs.dtype], (n_final, *obs.shape[1:]))
    elif report.final_obs is not None and (report.final_obs.ndim == 0 or len(report.final_obs)):
        raise ProtocolError("step: final_obs given without final_index")
    _check_outcome(report, expect or Expect(0, 1, (), ""))
    return report


def _all_finite(arr: np.ndarray) -> bool:
    return np.count_nonzero(np.isfinite(arr)) == arr.size  # = .all(): count_nonzero is one C call, .all() is not


def _check_bounded(arr: np.ndarray, name: str, bound: float, key: str) -> None:
    if not within(arr, bound):
        worst = arr.flat[int(np.argmax(np.where(np.isnan(arr), np.inf, np.abs(arr))))]
        raise ProtocolError(f"step: {name} must be finite and within +-{bound:g} (the learner's {key}), got {worst:g}")


def _check_outcome(report: StepReport, expect: Expect) -> None:
    """What the learner trusts beyond shapes: finite numbers within their declared bounds (float32 GAE and
    losses overflow past them, issue 60), and a final observation for exactly the envs cut by a time limit
    (truncated, not terminated), so none is bootstrapped from its reset observation."""
    _check_bounded(report.rewards, "rewards", expect.max_abs_reward, "cluster.max_abs_reward")
    if report.obs.dtype.kind == "f":
        _check_bounded(report.obs, "obs", expect.max_abs_obs, "cluster.max_abs_obs")
    if report.final_obs is not None and report.final_obs.dtype.kind == "f":
        _check_bounded(report.final_obs, "final_obs", expect.max_abs_obs, "cluster.max_abs_obs")
    if len(report.episode_returns) and not _all_finite(report.episode_returns):
        raise ProtocolError("step: episode_returns must be finite")
    if len(report.episode_lengths) and report.episode_lengths.min() < 0:
        raise ProtocolError("step: episode_lengths must be >= 0")
    if not len(report.final_index) and not np.count_nonzero(report.truncated):  # = .any(), in one C call
        return  # the usual step: nothing cut by a time limit, nothing to match
    cut = np.flatnonzero(report.truncated & ~report.terminated).tolist()
    if sorted(report.final_index.tolist()) != cut:
        raise ProtocolError(f"step: final_index {report.final_index.tolist()[:8]} must list each env truncated "
                            f"and not terminated once, {cut[:8]}")


def _starting(body, arrays, expect):
    _no_arrays(arrays)
    built, total = _get(body, "built", int), _get(body, "total", int)
    if not 0 <= built <= total <= MAX_ENV_SLOTS:
        raise ProtocolError(f"starting: need 0 <= built <= total <= {MAX_ENV_SLOTS}, got {built}/{total}")
    return Starting(built=built, total=total)


def _actions(body, arrays, expect):
    shape = (expect.group_size, *expect.action_shape) if expect else None
    dtype = expect.action_dtype if expect else codec.DTYPE_NAMES.get(arrays.get("actions", np.zeros(0)).dtype)
    return Actions(group=_group(body, expect), actions=_check(arrays, "actions", dtype, shape),
                   version=_get(body, "version", int))


def _weights(body, arrays, expect):
    return Weights(version=_get(body, "version", int), tensors=arrays)


def _text(cls):
    def build(body, arrays, expect):
        _no_arrays(arrays)
        return cls(reason=printable(_get(body, "reason", str), 1000))
    return build


def _error(body, arrays, expect):
    _no_arrays(arrays)
    rejoin = _get(body, "rejoin", bool, optional=True)  # absent from older peers' errors
    return Error(reason=printable(_get(body, "reason", str), 1000), rejoin=bool(rejoin))


def _redirect(body, arrays, expect):
    _no_arrays(arrays)
    address = _get(body, "address", str)
    if not address.startswith(("tcp://", "ipc://")) or len(address) > 512:
        raise ProtocolError(f"redirect: address must be a tcp:// or ipc:// endpoint of at most 512 chars, got {address!r:.80}")
    return Redirect(address=address, reason=printable(_get(body, "reason", str), 1000))


_BUILDERS = {"handshake": _handshake, "welcome": _welcome, "starting": _starting, "step": _step, "actions": _actions,
             "weights": _weights, "goodbye": _text(Goodbye), "error": _error, "redirect": _redirect}
