EXIT_REFUSED = 3
"""An actor's exit code when the learner refused it: distinct from 1 (learner gone), so a supervisor
knows a restart would be refused again. Here, not in runner, so launch.py needs no env imports for it."""
