"""`python -m ppo_cluster COMMAND ...`: the `ppo-cluster` command without an install (ppo_cluster/cli.py)."""
import sys

from ppo_cluster.cli import main

if __name__ == "__main__":
    sys.exit(main())
