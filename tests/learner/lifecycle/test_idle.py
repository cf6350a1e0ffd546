"""Rollouts without a sample on any rank (issue 60, point 3): said, then past cluster.no_actors_timeout_s the end."""
import logging
import time

from learner.config import ClusterConfig
from learner.lifecycle.idle import IdleRollouts
from learner.update.ranks import Ranks


def test_empty_rollouts_end_the_run_past_the_limit_after_the_first_only(caplog):
    idle = IdleRollouts(ClusterConfig(no_actors_timeout_s=0.05, actor_timeout_s=1.0), Ranks.single(), lambda: "join")
    with caplog.at_level(logging.WARNING, logger="learner"):
        assert idle.empty(first_done=False) is None
        time.sleep(0.1)  # past the limit: a span of time, not synchronization
        assert idle.empty(first_done=False) is None, "the first rollout's wait is cluster.startup_timeout_s's"
        why = idle.empty(first_done=True)
    assert why is not None and "(cluster.no_actors_timeout_s = 0.05; 0 waits for ever); the run ends" in why
    idle.sampled()
    assert idle.empty(first_done=True) is None  # counted again from the next empty rollout
    assert IdleRollouts(ClusterConfig(no_actors_timeout_s=0), Ranks.single(), lambda: "").empty(True) is None
