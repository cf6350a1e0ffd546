"""The messages on the pipe between the training process (learner/collection/processes/pool.py) and each collector
process (learner/collection/processes/process.py). Each side checks what it receives with `check`: anything else is one
clear error naming what came and what was expected.

    to a collector                  Know       collector 0 only: where it may redirect joiners
                                    Collect    load weights `version`, fill one rollout, answer Done
                                    Rows       where that rollout's columns go
                                    Strike     the actors of these slots made a rollout unusable
                                    Close      goodbyes to the actors, exit
    from a collector                Ready      bound, at `endpoint`
                                    Width      a rollout starts with `columns` columns (then: Rows)
                                    Done       the rollout is complete: its Shard
                                    Stopped    told to stop mid-rollout
                                    Failed     `text`, before exiting 1
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import dataclass_transform

from learner.collection.counters import RolloutCounts
from learner.collection.processes.shard import Shard


class PipeError(Exception):
    """A message of a kind the receiver does not expect there."""


@dataclass_transform(frozen_default=True)
class Message:
    """A message on the pipe: every subclass is a frozen dataclass of its annotated fields."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True)(cls)


class Know(Message):
    collectors: list[str]      # every collector's advertised address, collector 0 first
    ranks: list[str] | None    # every learner rank's (rank 0 of several), else None


class Collect(Message):
    version: int                   # the weights to act with (loaded from SharedWeights when new)
    rank_slots: list[int] | None   # every rank's live env slots (collector 0 of rank 0 of several)


class Rows(Message):
    rows_id: int
    offset: int           # the collector's first column in them
    arrays: dict | None   # the shared arrays (None: the collector holds rows_id already)
    alive: set[int]       # the ids of the arrays the pool still has (the collector lets the others go)


class Strike(Message):
    slots: list[int]      # the collector's own slot numbers
    reason: str


class Close(Message):
    """Goodbyes to the actors, then exit."""


class Ready(Message):
    endpoint: str


class Width(Message):
    columns: int


class Done(Message):
    shard: Shard
    counts: RolloutCounts | None = None  # where the rollout's time went (learner/collection/counters.py)


class Stopped(Message):
    """Told to stop mid-rollout."""


class Failed(Message):
    text: str


TO_COLLECTOR = (Know, Collect, Rows, Strike, Close)
FROM_COLLECTOR = (Ready, Width, Done, Stopped, Failed)


def check(message, expected: tuple[type, ...], sender: str):
    """`message` if it is one of `expected`, else PipeError naming what came from `sender`."""
    if isinstance(message, expected):
        return message
    came = type(message).__name__
    if not isinstance(message, TO_COLLECTOR + FROM_COLLECTOR):
        came = f"an unknown message ({came} {message!r:.80})"
    raise PipeError(f"{sender} sent {came} where {' or '.join(k.__name__ for k in expected)} was expected")


def describe_failure(message, sender: str) -> str:
    """What a collector's unexpected answer means: its own error, or a message out of turn."""
    if isinstance(message, Failed):
        return f"{sender}: {message.text}"
    return f"{sender}: sent {type(message).__name__} out of turn"
