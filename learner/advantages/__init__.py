"""A finished rollout becomes a training batch: bootstrap values, reward scaling, GAE."""
