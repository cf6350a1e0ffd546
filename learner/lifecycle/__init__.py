"""The learner as a process of a run: it starts or refuses in one line (startup.py), holds its run directory
alone (run_lock.py), stops on a signal or when its launcher is gone, and exits with a code the launcher reads
(process.py). Torch-free: launch.py imports it before any heavy import."""
