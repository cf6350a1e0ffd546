"""What the learner tells the user: one line per update (stdout and learner.log), one JSON object per
update in metrics.jsonl. Timing fields (sps, elapsed_s, eta_s) are the only ones that vary run to run.
"""
from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

log = logging.getLogger("learner")

FIELDS = ("update", "env_steps", "sps", "episode_return_mean", "episode_length_mean", "episodes",
          "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance",
          "learning_rate", "actors", "weights_version", "elapsed_s")
TIMING_FIELDS = ("sps", "elapsed_s", "eta_s", "update_s", "collect_s")


def setup_logging(run_dir: Path) -> None:
    """Log lines go to stdout and RUN_DIR/learner.log (appended, so a resumed run keeps its history)."""
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    for handler in (logging.StreamHandler(sys.stdout), logging.FileHandler(run_dir / "learner.log")):
        handler.setFormatter(fmt)
        root.addHandler(handler)


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
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.file = open(self.path, "a", buffering=1)

    def write(self, record: dict) -> None:
        record = {k: _clean(v) for k, v in record.items()}
        self.file.write(json.dumps(record) + "\n")
        log.info(format_line(record))

    def close(self) -> None:
        self.file.close()


def format_line(r: dict) -> str:
    ret = r.get("episode_return_mean")
    ret_text = "-" if ret is None else f"{ret:.2f}"
    parts = [f"update {r['update']}", f"steps {r['env_steps']:,} ({r.get('progress', 0) * 100:.1f}%)",
             f"sps {r['sps']:,.0f}", f"return {ret_text} (episodes {r['episodes']})"]
    if r.get("policy_loss") is not None:
        parts.append(f"pg {r['policy_loss']:+.4f} v {r['value_loss']:.4f} ent {r['entropy']:.3f} "
                     f"kl {r['approx_kl']:.4f} clip {r['clip_fraction']:.3f} ev {_num(r['explained_variance'])}")
    if r.get("eval_return_mean") is not None:
        parts.append(f"eval {r['eval_return_mean']:.2f}")
    parts.append(f"lr {r['learning_rate']:.2e}")
    parts.append(f"actors {r['actors']}")
    if r.get("rejected_messages"):
        parts.append(f"rejected {r['rejected_messages']}")
    parts.append(f"eta {_fmt_duration(r.get('eta_s'))}")
    return " | ".join(parts)


def _num(x) -> str:
    return "-" if x is None else f"{x:.3f}"
