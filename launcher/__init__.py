"""What `python launch.py` runs: its options (cli.py), the run directory it takes (take_run_dir.py), the supervisor of
the processes it starts (cluster.py: the learner ranks, the actors, the evaluator, each started by children.py),
its stop requests (stops.py: Ctrl-C, SIGTERM), the learner's restarts (restarts.py) and the torchrun or srun job
it may be one rank of (job.py). Torch-free: the children import torch and the envs, never the launcher."""
