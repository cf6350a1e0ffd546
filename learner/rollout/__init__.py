"""The rollout storage: the contract between collection and training."""
