"""Collection's two forms (learner/collection/forms.py): where the collector processes after the first bind."""
from learner.collection.forms import collector_address


def test_other_collectors_bind_a_free_port_of_the_first_ones_host_or_an_ipc_path_beside_it():
    assert collector_address("tcp://10.0.0.5:5555", 2) == "tcp://10.0.0.5:0"
    assert collector_address("tcp://[::1]:5555", 1) == "tcp://[::1]:0"
    first = "ipc:///tmp/ppo-cluster-x/learner.sock"
    assert collector_address(first, 3) == f"{first}-collector-3"
