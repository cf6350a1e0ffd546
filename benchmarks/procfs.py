"""What the benchmarks read about the processes they start, and how they stop them (Linux: reads /proc).

Shared by throughput.py and soak.py, which import it as a sibling module (`import procfs`):

  * /proc: resident memory (read_rss_mb), proportional set size (read_pss_mb), state, parent, group, start time and CPU ticks of one process
    (proc_stat) or of all (all_stats), the process tree (children_of, descendants), CPU seconds of a tree
    (tree_cpu_s), command lines (cmdline), and the busy CPU time of the whole machine (machine_busy_ticks);
  * stopping: kill (one pid), kill_group (a process group), kill_tree (a pid and its descendants),
    terminate (SIGTERM a Popen and wait for it);
  * a run's files: read_metrics / last_metrics (RUN_DIR/metrics.jsonl), tail (the end of a log);
  * fmt: how both scripts print a number that may be missing.

Processes come and go while these look: a pid that is gone reads as None (or 0 CPU) or is skipped, and
signalling one that is gone (or not ours) is not an error.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")  # clock ticks per second: the unit of /proc/PID/stat and /proc/stat times


# ----------------------------------------------------------------------------------------------- /proc

def read_rss_mb(pid: int, field: str = "VmRSS") -> float | None:
    """Resident memory (VmRSS; VmHWM: its peak since the process started) of a process in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None  # gone, a zombie (no VmRSS line), or not ours to read


def read_pss_mb(pid: int) -> float | None:
    """Proportional set size (Pss of /proc/PID/smaps_rollup) in MB: resident memory with each shared page
    divided among the processes that map it, so the PSS of several processes adds up without counting
    shared memory (a rollout in shared memory, the libraries) twice."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def proc_stat(pid: int) -> tuple[str, int, int, int, int] | None:
    """(state, ppid, pgid, starttime, utime + stime in clock ticks) from /proc/PID/stat; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the comm field may contain spaces and parens
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19]), int(fields[11]) + int(fields[12])


def all_stats() -> dict[int, tuple[str, int, int, int, int]]:
    """proc_stat of every process on the machine, by pid (zombies included)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := proc_stat(int(entry.name))) is not None:
            out[int(entry.name)] = st
    return out


def alive(pid: int, starttime: int | None = None) -> bool:
    """Running (not a zombie), and, when starttime is given, still the same process (pids get reused)."""
    st = proc_stat(pid)
    return st is not None and st[0] != "Z" and (starttime is None or st[3] == starttime)


def children_of(pid: int, stats: dict | None = None) -> list[int]:
    """Direct children of pid, from stats (all_stats(); read now when not given)."""
    return [p for p, st in (all_stats() if stats is None else stats).items() if st[1] == pid]


def descendants(root: int, stats: dict | None = None) -> set[int]:
    """Children, grandchildren, ... of root, from stats (all_stats(); read now when not given)."""
    children: dict[int, list[int]] = {}
    for pid, st in (all_stats() if stats is None else stats).items():
        children.setdefault(st[1], []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and of its live descendants (all threads); 0 when it is gone."""
    stats = all_stats()
    return sum(stats[p][4] for p in {pid} | descendants(pid, stats) if p in stats) / TICKS


def cmdline(pid: int) -> str:
    """The command line of a process, arguments separated by spaces; "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def machine_busy_ticks() -> int:
    """CPU time the whole machine spent busy (all cores, every process; /proc/stat, clock ticks)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]) - fields[3] - fields[4]  # user..steal, less idle and iowait


# ----------------------------------------------------------------------------------------------- stopping

def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send sig to one process; nothing when it is gone or not ours."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send sig to every process of a process group (e.g. a Popen started with start_new_session=True)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL the descendants of a process, then the process."""
    for p in [*descendants(pid), pid]:
        kill(p)


def terminate(proc: subprocess.Popen, timeout: float) -> bool:
    """SIGTERM proc unless it has exited, and wait up to timeout seconds; True when it has exited."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
    return True


def start_launch(cmd: list[str], checkout: Path, run_dir: Path, env: dict | None = None) -> tuple[subprocess.Popen, object]:
    """Start a benchmark's launch.py run (`cmd`) in `checkout`, importing that checkout's code, in a process
    group of its own, its output into RUN_DIR.log: (the process, the open log file; see stop_launch). env: more
    environment variables (they win over PYTHONPATH's default)."""
    env = {**os.environ, "PYTHONPATH": str(checkout), **(env or {})}
    log = open(run_dir.with_suffix(".log"), "w")
    return subprocess.Popen(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True), log


def stop_launch(proc: subprocess.Popen, workers: list, log) -> None:
    """End a benchmark's launch.py run: SIGTERM (30 s to stop in order), then its process group killed; the
    actor processes it started itself joined (5 s each) or killed; the run's log file closed."""
    terminate(proc, 30)
    kill_group(proc.pid)
    for w in workers:
        w.join(5)
        if w.is_alive():
            w.kill()
    log.close()


# ----------------------------------------------------------------------------------------------- run files

def read_metrics(path: Path) -> list[dict]:
    """Every complete line of a metrics.jsonl (stops at a line being written); [] when there is none yet."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line being written
    return out


def last_metrics(path: Path, tail_bytes: int = 65536) -> dict | None:
    """The newest complete line of a metrics.jsonl, reading only the end of the file."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - tail_bytes, 0))
            data = f.read()
    except OSError:
        return None
    for line in reversed(data.split(b"\n")):
        line = line.strip()
        if line:
            try:
                return json.loads(line)
            except ValueError:
                continue  # a line cut by the seek, or half-written
    return None


def tail(path: Path, n: int = 30, missing: str = "(none)") -> str:
    """The last n lines of a text file (a log); missing when it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return missing


def fmt(x, digits: int = 0) -> str:
    """x with thousands separators and digits decimals; "-" for None."""
    return "-" if x is None else f"{x:,.{digits}f}"
