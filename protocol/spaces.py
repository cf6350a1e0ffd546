"""Observation and action spaces as plain data, so they can cross the wire without gymnasium."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from protocol.errors import ProtocolError

KINDS = ("discrete", "box")


@dataclass
class SpaceSpec:
    kind: str
    """'discrete' (n actions) or 'box' (dtype, shape, low, high)"""
    shape: tuple[int, ...] = ()
    dtype: str = "int64"
    n: int = 0
    low: list[float] = field(default_factory=list)
    high: list[float] = field(default_factory=list)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ProtocolError(f"space: unknown kind {self.kind!r} (expected one of {KINDS})")
        self.shape = tuple(int(d) for d in self.shape)
        if any(d <= 0 for d in self.shape):
            raise ProtocolError(f"space: non-positive dimension in shape {self.shape}")
        if self.kind == "discrete" and self.n <= 0:
            raise ProtocolError(f"space: discrete space needs n > 0, got {self.n}")

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "shape": list(self.shape), "dtype": self.dtype, "n": self.n,
                "low": list(self.low), "high": list(self.high)}

    @classmethod
    def from_dict(cls, data) -> "SpaceSpec":
        if not isinstance(data, dict):
            raise ProtocolError(f"space: expected a map, got {type(data).__name__}")
        try:
            return cls(kind=data["kind"], shape=tuple(data["shape"]), dtype=str(data["dtype"]),
                       n=int(data["n"]), low=[float(x) for x in data["low"]],
                       high=[float(x) for x in data["high"]])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"space: malformed description ({exc!r})") from None

    @classmethod
    def from_gym(cls, space) -> "SpaceSpec":
        """Describe a gymnasium space; duck-typed so this module never imports gymnasium."""
        name = type(space).__name__
        if name == "Discrete":
            return cls(kind="discrete", shape=(), dtype="int64", n=int(space.n))
        if name == "Box":
            if int(np.prod(space.shape)) > 1024:  # image bounds are implied by the dtype; keep handshakes small
                return cls(kind="box", shape=tuple(space.shape), dtype=str(space.dtype))
            low = np.broadcast_to(space.low, space.shape).astype(np.float64).ravel().tolist()
            high = np.broadcast_to(space.high, space.shape).astype(np.float64).ravel().tolist()
            return cls(kind="box", shape=tuple(space.shape), dtype=str(space.dtype), low=low, high=high)
        raise ProtocolError(f"unsupported space {space!r}: only Discrete and Box are supported")
