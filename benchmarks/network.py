"""Actors behind a limited link (issue 34): bytes per agent step on the wire, and steps/s against the unlimited link.

    sudo python benchmarks/network.py                                   # Pong, Breakout, SpaceInvaders; 3 links
    sudo python benchmarks/network.py --games Pong --delays 5,20 --links unlimited
    sudo python benchmarks/network.py --codec none                      # raw frames, as before issue 34

The learner runs here (`launch.py --actors 0 --collect-only --random-policy`, so the actors are what limits
the rate, as on a GPU learner) bound to TCP on one end of a veth pair; the actors (`python -m actor`) run in a
Linux network namespace on the other end, so everything they exchange with the learner crosses the veth.
Links: a tc tbf rate limit on both ends of the pair (100mbit, 1gbit, unlimited). Delays: a small userspace
TCP proxy in the path (tc netem is not in these kernels) holds every chunk D ms in each direction, so
the round trip grows by 2D. All links and delays of a game are measured in one run, in interleaved windows
(each round visits every setting; each setting's steps/s is divided by the unlimited window of its own
round, and the median over rounds is printed), so the machine's load drifts into every setting alike.

Per game and setting it prints bytes per agent step in each direction (from the veth's counters: TCP/IP
headers, CURVE and acknowledgements included) and steps/s as a ratio to the unlimited link, then the goals.
Needs root (network namespaces, tc); without it, one line and exit 0. The cluster over TCP needs CURVE keys;
they are made in a temporary directory with `python -m protocol.security keygen`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (REPO, HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from cli import add_cluster_flags, add_out, parser  # noqa: E402
from procfs import kill_group, last_metrics, tail, terminate  # noqa: E402

GOAL_BYTES = 2000  # actor -> learner per agent step
GOAL_RATIO = 0.9  # 100 Mbit/s, and 5 ms one-way delay, against the unlimited link
SETTLE_S = 2.0  # after a switch, before a window is measured (queues drain, rates settle)


# ------------------------------------------------------------------------------------------- the link

class Link:
    """A network namespace and a veth pair: the host end (the learner's side) and the namespace's end."""

    def __init__(self, index: int):
        tag = f"{os.getpid() % 100000}{index}"
        self.ns, self.host, self.peer = f"ppo-net-{tag}", f"ppoh{tag}", f"ppon{tag}"
        subnet = f"10.213.{(os.getpid() * 8 + index) % 250}"  # apart from the tests' 10.77.0.0/24, and per run
        self.host_ip, self.peer_ip = f"{subnet}.1", f"{subnet}.2"
        self.made: list[str] = []

    def up(self) -> None:
        _ip("netns", "add", self.ns)
        self.made.append("ns")
        _ip("link", "add", self.host, "type", "veth", "peer", "name", self.peer)
        self.made.append("link")
        _ip("link", "set", self.peer, "netns", self.ns)
        _ip("addr", "add", f"{self.host_ip}/24", "dev", self.host)
        _ip("link", "set", self.host, "up")
        for args in (("addr", "add", f"{self.peer_ip}/24", "dev", self.peer), ("link", "set", self.peer, "up"),
                     ("link", "set", "lo", "up")):
            _ip("netns", "exec", self.ns, "ip", *args)

    def limit(self, rate: str | None) -> None:
        """A tbf rate limit on both ends (rate None: none)."""
        for prefix, dev in (([], self.host), (["ip", "netns", "exec", self.ns], self.peer)):
            if rate is None:
                subprocess.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
            else:
                _run([*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "256kb",
                      "latency", "50ms"])

    def counters(self) -> tuple[int, int]:
        """(bytes actors -> learner, bytes learner -> actors) so far: the host end's rx and tx."""
        stats = Path(f"/sys/class/net/{self.host}/statistics")
        return int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text())

    def down(self) -> None:
        if "link" in self.made:
            subprocess.run(["ip", "link", "del", self.host], capture_output=True)
        if "ns" in self.made:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        self.made = []


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")


# ------------------------------------------------------------------------------------------ the proxy

def serve_proxy(listen: str, upstream: str) -> None:
    """A TCP proxy holding every chunk `delay` seconds in each direction; the delay is read from stdin lines
    ("0.005"), and stdin's end (the benchmark gone) ends the proxy. Prints its port once listening."""
    asyncio.run(_proxy(listen, upstream))


async def _proxy(listen: str, upstream: str) -> None:
    loop = asyncio.get_running_loop()
    state = {"delay": 0.0}
    done = loop.create_future()

    def control():
        line = sys.stdin.readline()
        if not line:
            loop.remove_reader(sys.stdin.fileno())
            done.set_result(None)
        else:
            state["delay"] = float(line)
    loop.add_reader(sys.stdin.fileno(), control)
    up_host, up_port = upstream.rsplit(":", 1)

    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(up_host, int(up_port))
            await asyncio.gather(_pump(reader, up_writer, state), _pump(up_reader, writer, state),
                                 return_exceptions=True)
        except (asyncio.CancelledError, OSError):
            writer.close()  # the proxy is ending, or the learner went away: the connection ends with it
    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port))
    print(server.sockets[0].getsockname()[1], flush=True)
    await done
    server.close()


async def _pump(reader, writer, state: dict) -> None:
    """Forward what reader yields to writer, each chunk `state['delay']` seconds after it arrived, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)  # the simulated link's latency, not synchronization
            writer.write(data)
            await writer.drain()
        writer.close()
    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + state["delay"], data))
    finally:
        queue.put_nowait((0.0, None))
        await sender


class Proxy:
    def __init__(self, listen_ip: str, upstream: str):
        self.proc = subprocess.Popen([sys.executable, __file__, "--proxy", f"{listen_ip}:0", upstream],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        port = self.proc.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"the delay proxy did not start ({port!r})")
        self.address = f"tcp://{listen_ip}:{port}"

    def delay(self, seconds: float) -> None:
        self.proc.stdin.write(f"{seconds}\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # its end of input ends it
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            kill_group(self.proc.pid)


# ---------------------------------------------------------------------------------------- the cluster

def make_keys(tmp: Path, actors: int) -> tuple[Path, Path]:
    """(the learner's key directory, the directory of allowed actors' keys), made by the project's keygen."""
    keys, allowed = tmp / "keys", tmp / "allowed"
    for name, where in [("learner", keys), *[(f"actor{i}", allowed) for i in range(actors)]]:
        done = subprocess.run([sys.executable, "-m", "protocol.security", "keygen", str(where), name], cwd=REPO,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        if done.returncode != 0:
            raise RuntimeError(f"keygen {name}: {done.stderr.strip()}")
    return keys, allowed


class Cluster:
    """A collect-only learner bound on the link's host end, and actors in its namespace (through the delay
    proxy when there is one)."""

    def __init__(self, args, game: str, link: Link, tmp: Path, keys: tuple[Path, Path]):
        self.args, self.link, self.keys = args, link, keys
        self.run_dir = tmp / f"run-{game}-{args.codec}"
        self.env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.procs: list[subprocess.Popen] = []
        self.proxy: Proxy | None = None
        self.log = open(tmp / f"{game}-{args.codec}.log", "w")
        self.learner = self._spawn(self._learner_cmd(game))

    def _learner_cmd(self, game: str) -> list[str]:
        a, keys = self.args, self.keys
        return [sys.executable, "launch.py", "--config", "configs/pong.toml", "--actors", "0", "--collect-only",
                "--random-policy", "--total-steps", str(10**12), "--run-dir", str(self.run_dir),
                "--set", f'env.env_id="ALE/{game}-v5"', "--set", f'cluster.address="tcp://{self.link.host_ip}:0"',
                "--set", f'cluster.server_key="{keys[0] / "learner.key_secret"}"',
                "--set", f'cluster.allowed_keys="{keys[1]}"', "--set", f"cluster.min_envs={a.actors * a.envs}",
                "--set", f"ppo.num_steps={a.num_steps}", "--set", f'cluster.codec="{a.codec}"']

    def _spawn(self, cmd: list[str], stdin=None) -> subprocess.Popen:
        proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                start_new_session=True, stdin=stdin)
        self.procs.append(proc)
        return proc

    def start_actors(self, with_proxy: bool) -> None:
        endpoints = self._wait(lambda: _json(self.run_dir / "endpoints.json"), 120, "the learner's endpoints")
        address = endpoints["address"]
        if with_proxy:
            self.proxy = Proxy(self.link.host_ip, address.removeprefix("tcp://"))
            address = self.proxy.address
        a, (keys, allowed) = self.args, self.keys
        for i in range(a.actors):
            self._spawn(["ip", "netns", "exec", self.link.ns, sys.executable, "-m", "actor", "--learner", address,
                         "--envs", str(a.envs), "--groups", str(a.groups), "--name", f"net-{i}",
                         "--server-key", str(keys / "learner.key"), "--key", str(allowed / f"actor{i}.key_secret"),
                         "--join-timeout-s", "120"], stdin=subprocess.DEVNULL)
        self._wait(lambda: (last_metrics(self.run_dir / "metrics.jsonl") or {}).get("update", 0) >= 3, 300,
                   "three rollouts")

    def _wait(self, probe, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while (got := probe()) is None or got is False:
            if self.learner.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {timeout:g}s; log:\n{tail(Path(self.log.name), 30)}")
            time.sleep(0.2)  # polling a file the learner writes
        return got

    def sample(self) -> tuple[float, int, int, int]:
        """(learner's elapsed_s, env_steps) at its last rollout, and the link's byte counters."""
        last = last_metrics(self.run_dir / "metrics.jsonl") or {}
        return (last.get("elapsed_s", 0.0), last.get("env_steps", 0), *self.link.counters())

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        terminate(self.learner, 30)  # its goodbye ends the actors
        for proc in self.procs:
            kill_group(proc.pid)
            proc.wait(10)
        self.log.close()


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------- the windows

def settings(args) -> list[tuple[str, str | None, float]]:
    """(label, tbf rate or None, one-way delay in seconds); the unlimited link first."""
    out = [("unlimited", None, 0.0)]
    out += [(rate, rate, 0.0) for rate in args.links.split(",") if rate and rate != "unlimited"]
    out += [(f"{d:g} ms", None, d / 1000) for d in map(float, filter(None, args.delays.split(",")))]
    return out


def measure(cluster: Cluster, label: str, rate, delay: float, seconds: float) -> dict:
    cluster.link.limit(rate)
    if cluster.proxy is not None:
        cluster.proxy.delay(delay)
    time.sleep(SETTLE_S)  # the measured windows: the switch settles, then the window runs
    t0, (e0, s0, up0, down0) = time.monotonic(), cluster.sample()
    time.sleep(seconds)
    t1, (e1, s1, up1, down1) = time.monotonic(), cluster.sample()
    sps = (s1 - s0) / (e1 - e0) if e1 > e0 else 0.0
    steps = sps * (t1 - t0)
    return {"setting": label, "sps": sps, "up_bytes_per_step": (up1 - up0) / steps if steps else None,
            "down_bytes_per_step": (down1 - down0) / steps if steps else None}


def run_game(args, game: str, index: int, tmp: Path, keys) -> list[dict]:
    link, cluster, rows = Link(index), None, []
    try:
        link.up()
        cluster = Cluster(args, game, link, tmp, keys)
        cluster.start_actors(with_proxy=bool(args.delays))
        for r in range(args.rounds):
            windows = [measure(cluster, label, rate, delay, args.window) for label, rate, delay in settings(args)]
            base = windows[0]["sps"]
            for w in windows:
                rows.append({"game": game, "round": r, "ratio": w["sps"] / base if base else None, **w})
                print(f"  {game:<14} round {r}  {w['setting']:<10} {w['sps']:>8,.0f} steps/s  "
                      f"{_num(w['up_bytes_per_step']):>7} B/step up  {_num(w['down_bytes_per_step']):>5} B/step down",
                      flush=True)
    finally:
        if cluster is not None:
            cluster.close()
        link.down()
    return rows


def _num(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def report(args, rows: list[dict]) -> list[str]:
    """The table (medians over rounds) and the goals' verdicts."""
    envs = args.actors * args.envs
    lines = ["| game | link | actor -> learner B/step | learner -> actor B/step | steps/s | vs unlimited |",
             "|---|---|---:|---:|---:|---:|"]
    verdicts = []
    for game in dict.fromkeys(r["game"] for r in rows):
        for label, _, delay in settings(args):
            sel = [r for r in rows if r["game"] == game and r["setting"] == label]
            up, down = _median(r["up_bytes_per_step"] for r in sel), _median(r["down_bytes_per_step"] for r in sel)
            sps, ratio = _median(r["sps"] for r in sel), _median(r["ratio"] for r in sel)
            bound = f" (rule: <= {envs / (2 * delay):,.0f})" if delay else ""
            lines.append(f"| {game} | {label} | {_num(up)} | {_num(down)} | {_num(sps)}{bound} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}x'} |")
            if label == "unlimited":
                verdicts.append(_verdict(f"{game}: actor -> learner <= {GOAL_BYTES:,} B per agent step", up,
                                         up is not None and up <= GOAL_BYTES, "{:,.0f} B"))
            if label in ("100mbit", "5 ms"):
                verdicts.append(_verdict(f"{game}: {label} >= {GOAL_RATIO}x the unlimited steps/s", ratio,
                                         ratio is not None and ratio >= GOAL_RATIO, "{:.2f}x"))
    return lines + [""] + verdicts


def _verdict(goal: str, value, ok: bool, fmt: str) -> str:
    return f"goal {goal}: {'-' if value is None else fmt.format(value)}  {'PASS' if ok else 'FAIL'}"


def build_parser() -> argparse.ArgumentParser:
    p = parser(__doc__)
    add_cluster_flags(p, "actor processes", "auto", "cluster.codec (auto: zstd over this link)")
    p.add_argument("--games", default="Pong,Breakout,SpaceInvaders", help="ALE games (default: %(default)s)")
    p.add_argument("--links", default="unlimited,100mbit,1gbit", help="tc tbf rates (default: %(default)s)")
    p.add_argument("--delays", default="", help="one-way delays in ms through the proxy, e.g. 5,20 (default: none)")
    p.add_argument("--envs", type=int, default=32, help="envs per actor (default: %(default)s)")
    p.add_argument("--groups", type=int, default=2, choices=(1, 2), help="env groups per actor (default: 2)")
    p.add_argument("--num-steps", type=int, default=16, help="ppo.num_steps: one metrics line per rollout")
    p.add_argument("--window", type=float, default=8.0, help="measured seconds per window (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of interleaved windows (default: %(default)s)")
    add_out(p)
    p.add_argument("--proxy", nargs=2, metavar=("LISTEN", "UPSTREAM"), help=argparse.SUPPRESS)  # the proxy's own process
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.proxy:
        serve_proxy(*args.proxy)
        return 0
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("tc")):
        print("benchmarks/network.py needs root and the ip and tc tools (network namespaces, tbf): skipped")
        return 0
    games = [g.strip() for g in args.games.split(",") if g.strip()]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"network benchmark {started}: {args.actors} actors x {args.envs} envs ({args.groups} groups), codec "
          f"{args.codec}, {args.rounds} rounds of {args.window:g}s windows; load {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} cores", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ppo-network-") as tmp:
        keys = make_keys(Path(tmp), args.actors)
        for i, game in enumerate(games):
            rows += run_game(args, game, i, Path(tmp), keys)
    text = report(args, rows)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f} (1 min)\n" + "\n".join(text))
    if args.out:
        Path(args.out).write_text(json.dumps({"started": started, "args": vars(args), "rows": rows,
                                              "report": text}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
