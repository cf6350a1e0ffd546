"""What a run tells its user: logs, metrics.jsonl, TensorBoard/W&B sinks, plots."""
