"""The `ppo-cluster` command (pyproject.toml's console script): train | actor | evaluate | plot in one place.
In a checkout without an install, `python -m ppo_cluster COMMAND` is the same command."""
