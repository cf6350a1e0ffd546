EXIT_REFUSED = 3
"""An actor's exit code when the learner refused it: distinct from 1 (learner gone), so a supervisor
knows a restart would be refused again. Here, not in runner, so launch.py needs no env imports for it."""


def name_process(title: str) -> None:
    """Show this process as `ppo-cluster TITLE` in ps and top (instead of `python -c from multiprocessing.spawn
    ...`), like Sample Factory's and Ray's named workers. Needs setproctitle; without it, nothing happens."""
    try:
        from setproctitle import setproctitle  # optional: not a dependency
    except ImportError:
        return
    setproctitle(f"ppo-cluster {title}")
