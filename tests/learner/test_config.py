"""The actor topology launch.py chooses when the config leaves it open, and explicit values winning."""
import pytest

from learner.config import ClusterConfig, Config, ConfigError, from_dict, topology, with_topology


@pytest.mark.parametrize("cores,expected", [(1, (1, 8)), (2, (2, 4)), (3, (2, 4)), (4, (4, 2)), (6, (4, 2)),
                                            (8, (8, 1)), (16, (8, 1))])
def test_the_recipes_8_envs_over_the_cores(cores, expected):
    assert topology(ClusterConfig(), cores) == expected


def test_explicit_values_win_and_fill_in_the_other():
    assert topology(ClusterConfig(actors=3, envs_per_actor=5), 2) == (3, 5)
    assert topology(ClusterConfig(actors=4), 2) == (4, 2)
    assert topology(ClusterConfig(envs_per_actor=3), 2) == (3, 3)  # at least cluster.envs in all
    assert topology(ClusterConfig(actors=0), 2) == (0, 1)          # remote actors only
    assert topology(ClusterConfig(envs=16), 4) == (4, 4)


def test_with_topology_writes_concrete_values():
    cfg = with_topology(Config(), cores=2)
    assert (cfg.cluster.actors, cfg.cluster.envs_per_actor, cfg.num_envs) == (2, 4, 8)
    with pytest.raises(ConfigError, match="cluster.envs must be"):
        from_dict({"cluster": {"envs": 0}})
