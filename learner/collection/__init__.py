"""Step reports in, frame stacks, batched inference, actions out: filling a rollout."""
