"""The learner's door: the ROUTER socket, handshakes, validation, the actor registry."""
