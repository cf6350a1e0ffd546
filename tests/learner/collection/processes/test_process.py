"""A collector process's choices that need no process (learner/collection/processes/process.py): where a joiner goes."""
import numpy as np

from learner.collection.processes.board import ADMITTED, BOARD_COLUMNS, SLOTS
from learner.collection.processes.process import CollectorBalancer, redirect_chain


def test_a_joiner_goes_to_the_collector_with_the_fewest_slots_counting_those_on_their_way():
    board = np.zeros((3, BOARD_COLUMNS), np.int64)
    own = [0]
    balancer = CollectorBalancer(lambda: own[0], board)
    assert balancer(4) is None  # addresses not known yet: stay
    balancer.know(["tcp://a:1", "tcp://b:2", "tcp://c:3"])
    assert balancer(4) is None  # all empty: collector 0 on ties
    own[0] = 4
    assert balancer(4) == "tcp://b:2"
    assert balancer(4) == "tcp://c:3"  # b has 4 on their way, not yet admitted
    board[1, [SLOTS, ADMITTED]] = 4, 4   # b admitted its joiner
    assert balancer(4) is None           # 4 live at b, 4 on their way to c, 4 here: collector 0 on ties
    board[1, [SLOTS, ADMITTED]] = 0, 8   # b's actors both left
    assert balancer(2) == "tcp://b:2"


def test_redirects_ask_the_rank_first_then_the_collector():
    assert redirect_chain(None, lambda n: None)(4) is None
    assert redirect_chain(lambda n: "rank", lambda n: "collector")(4) == "rank"
    assert redirect_chain(lambda n: None, lambda n: "collector")(4) == "collector"


def test_weights_published_between_the_pools_collect_and_their_load_serve_from_the_first_step_and_say_so():
    """Policy lag with collector processes: the pool sends Collect(1); before the collector loads version 1, the
    update that ran meanwhile is done and version 2 is published, so the load gets 2. The collector hears that
    newer weights serve at once (its groups flow on, none of its steps is lagged), and only once; before, it
    served 2 while waiting for a version newer than 2 all rollout long (every group parked at its end)."""
    import torch

    from learner.collection.processes.process import ServedCopy
    from learner.weights.shared import SharedWeights

    trained, copy = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    weights = SharedWeights([trained])
    served = ServedCopy(weights, [copy])
    for version in (1, 2):
        with torch.no_grad():
            trained.weight += 1
        weights.publish([trained], version)
    served.load(1)
    assert served.version == 2 and torch.equal(copy.weight, trained.weight)
    assert served.newer(1) == 2 and served.newer(2) is None
