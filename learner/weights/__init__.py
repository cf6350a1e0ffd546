"""Weights out: the broadcast message, the publisher, and checkpoints."""
