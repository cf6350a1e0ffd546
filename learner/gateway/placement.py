"""Where an arriving actor goes: which learner rank (rank 0 redirects joiners, RankBalancer), each rank's
address and share of the start-up count, and the address other machines reach an endpoint at.

On the gateway side of the data path, where actors arrive; torch-free (collection/ and gateway/ import nothing
from update/)."""
from __future__ import annotations

import socket


def rank_address(address: str, rank: int) -> str:
    """Rank r's own endpoint: tcp ports shift by 2r (a fixed port pair per rank; port 0 stays 0), ipc
    paths get a -rankN suffix. Rank 0 keeps the configured address, so actors name one address."""
    if rank == 0:
        return address
    if address.startswith("ipc://"):
        return f"{address}-rank{rank}"
    host, _, port = address.rpartition(":")
    return address if port == "0" else f"{host}:{int(port) + 2 * rank}"


def min_envs_of_rank(min_envs: int, num_envs: int, actors: int, envs_per_actor: int, learners: int, rank: int) -> int:
    """The env slots rank `rank` waits for before its first rollout, when launch.py splits one host's actors
    over `learners` ranks (actor i joins rank i % learners); under torchrun each worker's config describes
    its own actors, so learners is 1 there and this is the plain min_envs."""
    if learners <= 1:
        return min_envs or num_envs
    if min_envs:
        return min_envs // learners + (1 if rank < min_envs % learners else 0)
    return sum(envs_per_actor for i in range(actors) if i % learners == rank)


def local_slots_of_rank(actors: int, envs_per_actor: int, learners: int, rank: int) -> int:
    """The env slots of the actors launch.py starts for rank `rank` (they name its address directly): actor
    i joins rank i % learners; under torchrun (learners 1) each worker starts its own cluster.actors."""
    if learners <= 1:
        return actors * envs_per_actor
    return sum(envs_per_actor for i in range(actors) if i % learners == rank)


def joiner_rank(loads: list[int], targets: list[int]) -> int:
    """Where rank 0 sends a joiner: the rank furthest below its target (the most env slots short, or the
    fewest over; the lower rank on ties). Before the first update the targets are each rank's share of
    min_envs and rank 0 fills its own share last: it starts its first rollout once its share is met and
    then answers no handshake until every rank has finished theirs, so by then every other rank must have
    been sent its share. After the first update the targets are 0: the least loaded rank, rank 0 on ties."""
    short = [r for r in range(1, len(loads)) if loads[r] < targets[r]]
    candidates = short or range(len(loads))
    return min(candidates, key=lambda r: (loads[r] - targets[r], r))


class RankBalancer:
    """Rank 0's choice of learner rank for each joining actor (see joiner_rank): the address of the rank to
    redirect it to, or None to keep it. `own_slots()` is rank 0's live env slots; the other ranks' come from
    the last update's count, plus the joiners sent to them since."""

    def __init__(self, own_slots, targets: list[int], loads: list[int]):
        self.own_slots, self.targets, self.loads = own_slots, list(targets), list(loads)
        self.addresses: list[str] = []  # every rank's advertised address, once gathered

    def know(self, addresses: list[str]) -> None:
        self.addresses = list(addresses)

    def after_update(self, rank_slots: list[int]) -> None:
        """The job's count of live env slots per rank; from now on the least loaded rank gets joiners."""
        self.loads, self.targets = list(rank_slots), [0] * len(rank_slots)

    def __call__(self, num_envs: int) -> str | None:
        if not self.addresses:
            return None
        best = joiner_rank([self.own_slots(), *self.loads[1:]], self.targets)
        if best == 0:
            return None
        self.loads[best] += num_envs  # until the next update's count says otherwise
        return self.addresses[best]


WILDCARD_HOSTS = ("*", "0.0.0.0", "::", "[::]", "")


def advertised_address(endpoint: str, advertise_host: str = "", node_name=socket.gethostname) -> str:
    """The address other machines reach a bound endpoint at, for redirects and endpoints.json.

    An explicit advertise_host wins; otherwise a tcp endpoint bound to one interface keeps its host, and one
    bound to every interface (zmq reports 0.0.0.0 or [::]) names this node (its host name), never 0.0.0.0.
    ipc endpoints are local paths and stay as they are."""
    if not endpoint.startswith("tcp://"):
        return endpoint
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    if advertise_host:
        host = advertise_host
    elif host in WILDCARD_HOSTS:
        host = node_name()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal
    return f"tcp://{host}:{port}"
