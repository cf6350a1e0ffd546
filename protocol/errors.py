class ProtocolError(ValueError):
    """Raised for any message that cannot be decoded or does not fit what was agreed at handshake.

    The message always says what was wrong, so the learner can log it next to the peer's name.
    """

    message_type: str | None = None
    """set by `messages.decode` once the header named a known type ("handshake", "step", ...)"""
