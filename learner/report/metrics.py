"""What the learner tells the user: one line per update (stdout and learner.log), one JSON object per
update in metrics.jsonl. Timing fields (sps, elapsed_s, eta_s) are the only ones that vary run to run.

With a config, MetricsWriter also feeds the sinks in learner/report/sinks.py (TensorBoard, Weights & Biases),
merges the newest evaluation result from RUN_DIR/eval.jsonl into each record (when evaluation runs), and
keeps a live progress bar on a terminal (learner/report/progress.py: never in learner.log).
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
from pathlib import Path

from learner.report.progress import ProgressBar
from learner.report.sinks import build_sinks
from protocol.files import WriteFailed, atomic_write, open_append
from protocol.private_dirs import remove_mine

log = logging.getLogger("learner")

TIMING_FIELDS = ("sps", "elapsed_s", "eta_s", "update_s", "collect_s", "collection")


def log_name(rank: int) -> str:
    return f"learner-rank-{rank}.log" if rank else "learner.log"


def setup_logging(run_dir: Path, rank: int = 0, tag: str = "") -> None:
    """Log lines go to stdout and RUN_DIR/learner.log (appended, so a resumed run keeps its history).

    Rank N > 0 of a multi-rank learner logs to RUN_DIR/learner-rank-N.log, its console lines tagged; a
    collector process (`tag`, e.g. "collector 1") logs to its rank's file, its lines tagged."""
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    tag = "".join(f"[{t}] " for t in (f"rank {rank}" if rank else "", tag) if t)
    fmt = logging.Formatter(f"%(asctime)s %(levelname)s {tag}%(message)s", "%H:%M:%S")
    logging.raiseExceptions = False  # a log file on a full disk: no traceback per line (stdout still has them)
    threading.excepthook = _thread_failed
    for handler in (logging.StreamHandler(sys.stdout), logging.StreamHandler(open_append(run_dir / log_name(rank)))):
        handler.setFormatter(fmt)
        root.addHandler(handler)


def _thread_failed(args) -> None:
    """A library's thread that fails on the disk (TensorBoard's event writer on a full disk) says so in one
    line; anything else keeps Python's traceback."""
    if isinstance(args.exc_value, OSError):
        name = args.thread.name if args.thread is not None else "a thread"
        log.warning("%s stopped: %s", name, args.exc_value)
    else:
        threading.__excepthook__(args)


def exit_process(code: int) -> None:
    """End a learner or collector process once it has closed what it opened: logs and consoles flushed, then
    os._exit. Skipping the interpreter's own teardown (torch's and every module's finalizers, seconds on a
    busy machine, measured ~2 s per process on 2 shared cores) lets a failed run end within its 3 s. The private
    socket directory goes first: its finalizer would not run."""
    remove_mine()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def append_line(file, record: dict) -> None:
    """One JSON line onto a run file; a full or read-only disk is WriteFailed (one line, the run stops)."""
    try:
        file.write(json.dumps(record) + "\n")
    except OSError as exc:
        raise WriteFailed(f"cannot write {file.name}: {exc.strerror or exc}") from None


class EvalReader:
    """Follows RUN_DIR/eval.jsonl (written by the eval worker): remembers its offset, reads only whole lines."""

    def __init__(self, path: Path):
        self.path, self.offset, self.latest = Path(path), 0, None

    def poll(self) -> dict | None:
        """The newest evaluation result so far, or None before the first."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.latest
        end = data.rfind(b"\n")
        if end < 0:
            return self.latest  # nothing, or half a line still being written
        for line in data[:end].splitlines():
            try:
                result = json.loads(line)
            except ValueError:
                continue
            if isinstance(result, dict) and "eval_return_mean" in result:
                self.latest = result
        self.offset += end + 1
        return self.latest


def drop_rows_after(path: Path, update: int) -> int:
    """Remove the lines of a per-update log (metrics.jsonl, episodes.jsonl) written after `update`.

    After a crash the log runs ahead of the newest checkpoint; a resume repeats those updates, so their
    old rows go (moved aside to PATH.dropped) and the log stays one clean, increasing curve. Returns how
    many lines were dropped."""
    path = Path(path)
    if not path.is_file():
        return 0
    keep, drop = [], []
    for line in path.read_text().splitlines(keepends=True):
        try:
            row_update = json.loads(line).get("update", 0)
        except (ValueError, AttributeError):
            row_update = None  # a half-written last line from the crash
        (keep if isinstance(row_update, int) and row_update <= update else drop).append(line)
    if drop:
        with open_append(path.with_name(path.name + ".dropped")) as f:
            f.writelines(line if line.endswith("\n") else line + "\n" for line in drop)
        atomic_write(path, "".join(keep))
    return len(drop)


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; null means "not defined yet"
    return value


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


class MetricsWriter:
    """metrics.jsonl plus, given the run's config, the sinks, the eval results and the progress bar."""

    def __init__(self, run_dir: Path, cfg=None):
        run_dir = Path(run_dir)
        self.path = run_dir / "metrics.jsonl"
        self.file = open_append(self.path, buffering=1)
        self.evals = EvalReader(run_dir / "eval.jsonl") if cfg is not None and cfg.eval.every > 0 else None
        self.sinks = build_sinks(run_dir, cfg)
        self.bar = None
        if cfg is not None and cfg.log.progress_bar and sys.stdout.isatty():
            self.bar = ProgressBar(sys.stdout, cfg.run.total_steps)
        self.last: dict | None = None

    def write(self, record: dict) -> None:
        if self.evals is not None:
            result = self.evals.poll() or {}
            record = {**record, "eval_return_mean": result.get("eval_return_mean"),
                      "eval_return_std": result.get("eval_return_std"), "eval_update": result.get("update")}
        record = {k: _clean(v) for k, v in record.items()}
        append_line(self.file, record)
        self.last = record
        log.info(format_line(record))
        if self.bar is not None:
            self.bar.update(record)
        for sink in list(self.sinks):
            try:
                sink.write(record)
            except Exception as exc:  # a broken sink never stops training
                log.warning("metrics sink %s failed (%s); it is switched off", type(sink).__name__, exc)
                self.sinks.remove(sink)

    def score(self) -> float | None:
        """The smoothed return that ranks checkpoints: the newest eval mean when evaluation runs, else the
        mean raw return of the last 100 training episodes; None while there is none."""
        if self.last is None:
            return None
        return self.last.get("eval_return_mean" if self.evals is not None else "episode_return_mean")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                log.warning("metrics sink %s did not close cleanly (%s)", type(sink).__name__, exc)
        close_quietly(self.file)


def close_quietly(file) -> None:
    """Close a run file whose last lines may not fit on a full disk (already said by WriteFailed)."""
    try:
        file.close()
    except OSError:
        pass


def format_line(r: dict) -> str:
    ret = r.get("episode_return_mean")
    ret_text = "-" if ret is None else f"{ret:.2f}"
    parts = [f"update {r['update']}", f"steps {r['env_steps']:,} ({r.get('progress', 0) * 100:.1f}%)",
             f"sps {r['sps']:,.0f}", f"return {ret_text} (episodes {r['episodes']})"]
    if r.get("policy_loss") is not None:
        parts.append(f"pg {_num(r['policy_loss'], '+.4f')} v {_num(r.get('value_loss'), '.4f')} "
                     f"ent {_num(r.get('entropy'))} kl {_num(r.get('approx_kl'), '.4f')} "
                     f"clip {_num(r.get('clip_fraction'))} ev {_num(r.get('explained_variance'))}")
    if r.get("eval_return_mean") is not None:
        parts.append(f"eval {r['eval_return_mean']:.2f}")
    parts.append(f"lr {r['learning_rate']:.2e}")
    parts.append(f"actors {r['actors']}")
    if r.get("rejected_messages"):
        parts.append(f"rejected {r['rejected_messages']}")
    parts.append(f"eta {_fmt_duration(r.get('eta_s'))}")
    return " | ".join(parts)


def _num(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)
