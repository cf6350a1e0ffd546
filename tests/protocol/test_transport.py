import sys

import pytest
import zmq

from protocol.transport import LOCAL, bind_router, connect_dealer, local_address


def test_addresses_other_than_local_are_kept_as_they_are():
    for address in ("tcp://127.0.0.1:0", "tcp://*:5555", "ipc:///tmp/learner.sock"):
        assert local_address(address) == address


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract Unix sockets are Linux's")
def test_local_is_an_abstract_unix_socket_of_its_own_that_actors_reach():
    first, second = local_address(LOCAL), local_address(LOCAL)
    assert first.startswith("ipc://@ppo-cluster-") and first != second
    ctx = zmq.Context()
    try:
        router, endpoint = bind_router(ctx, first, 1 << 20)
        assert endpoint == first
        dealer = connect_dealer(ctx, endpoint, 1 << 20)
        dealer.send(b"hello")
        assert router.poll(5000) and router.recv_multipart()[1] == b"hello"
        with pytest.raises(zmq.ZMQError):  # taken: a second learner is refused, never handed the first's actors
            bind_router(ctx, first, 1 << 20)
    finally:
        ctx.destroy(linger=0)
