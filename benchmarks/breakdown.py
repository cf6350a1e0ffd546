"""The collection breakdown of a run's steady state, from the `collection` field of its metrics.jsonl lines
(learner/collection/counters.py, learner/report/serial.py); imported as a sibling module, like procfs.

`steady_state(records, skip)`: the rollouts after the first `skip` (they pay for start-up, allocating and
first-touching the buffers), their agent steps/s and their breakdown per rollout; `describe` prints it.
"""
from __future__ import annotations

import statistics

PARTS = ("with_actors", "waiting_actions", "parked_end")
PHASES = ("batch", "update", "join", "publish", "gather", "report", "other")  # learner/main.py's serial phases, in order
PART_NAMES = {"with_actors": "with the actors (env step + transport)", "waiting_actions": "waiting for actions",
              "parked_end": "parked at the rollout's end"}


def steady_state(records: list[dict], skip: int) -> dict | None:
    """Agent steps/s and the breakdown over records[skip:] (records[skip - 1] is the base line; None: fewer than
    one rollout past it)."""
    skip = max(skip, 1)
    if len(records) <= skip:
        return None
    a, b = records[skip - 1], records[-1]
    measured = records[skip:]
    sps = (b["env_steps"] - a["env_steps"]) / max(b["elapsed_s"] - a["elapsed_s"], 1e-9)
    return {"sps": sps, "rollouts": len(measured), "skipped": skip, "breakdown": breakdown(measured)}


def breakdown(records: list[dict]) -> dict | None:
    """Per rollout, over `records`: means of the times, env-slot shares of the summed times, medians of each
    rollout's batch percentiles, mean messages/s per collector."""
    rows = [r["collection"] for r in records if r.get("collection")]
    if not rows:
        return None
    mean = lambda key: statistics.fmean(r[key] for r in rows)  # noqa: E731
    slot_s = sum(r["slot_s"] for r in rows)
    out = {"rollouts": len(rows), "rollout_s": mean("rollout_s"), "env_slots": mean("env_slots"),
           "batches": mean("batches"),
           "shares": {p: sum(r[f"{p}_s"] for r in rows) / slot_s if slot_s else None for p in PARTS}}
    for key in ("batch_slots", "batch_latency_ms"):
        have = [r[key] for r in rows if r.get(key)]
        out[key] = {q: statistics.median(h[q] for h in have) for q in ("mean", "p50", "p90", "p99")} if have else None
    width = min(len(r["messages_per_s"]) for r in rows)
    out["messages_per_s"] = [statistics.fmean(r["messages_per_s"][k] or 0.0 for r in rows) for k in range(width)]
    lagged = [r["lagged_share"] for r in rows if r.get("lagged_share") is not None]
    if lagged:  # policy lag: the share of steps acted one weights version behind their update's start
        out["lagged_share"] = statistics.fmean(lagged)
    serials = [r["serial_s"] for r in rows if r.get("serial_s")]
    if serials:
        phases = sorted({k for s in serials for k in s})
        out["serial_s"] = {k: statistics.fmean(s.get(k, 0.0) for s in serials) for k in phases}
        cycle = out["rollout_s"] + out["serial_s"]["total"]
        out["all_parked_share"] = out["serial_s"]["total"] / cycle if cycle else None
    return out


def describe(b: dict | None) -> list[str]:
    """The breakdown as printed lines (indented under a row)."""
    if b is None:
        return ["    (no collection breakdown in metrics.jsonl: a checkout from before it)"]
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    pct1 = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731  (the serial share's target is 2%)
    lines = [f"    per rollout ({b['rollouts']} measured): {b['rollout_s']:.2f}s collecting, "
             f"{b['env_slots']:.0f} env slots; env-slot time: "
             + ", ".join(f"{PART_NAMES[p]} {pct(b['shares'][p])}" for p in PARTS)]
    if "serial_s" in b:
        s = b["serial_s"]
        order = [k for k in PHASES if k in s] + sorted(k for k in s if k not in PHASES and k != "total")
        phases = " + ".join(f"{k} {s[k]:.3f}" for k in order)
        lines.append(f"    serial, every actor parked (unless they flow on: collect-only, policy lag): {s['total']:.3f}s per rollout "
                     f"({pct1(b['all_parked_share'])} of the cycle) = {phases}")
    bs, lat = b["batch_slots"], b["batch_latency_ms"]
    if bs and lat:
        lines.append(f"    inference: {b['batches']:.0f} batches per rollout, env slots mean {bs['mean']:.1f} "
                     f"p50/p90/p99 {bs['p50']:.0f}/{bs['p90']:.0f}/{bs['p99']:.0f}; latency ms p50/p90/p99 "
                     f"{lat['p50']:.2f}/{lat['p90']:.2f}/{lat['p99']:.2f}")
    lines.append("    messages/s per collector: " + ", ".join(f"{x:,.0f}" for x in b["messages_per_s"]))
    if b.get("lagged_share") is not None:
        lines.append(f"    policy lag: {pct(b['lagged_share'])} of the steps acted one weights version behind their update's start")
    return lines
