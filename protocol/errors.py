class ProtocolError(ValueError):
    """Raised for any message that cannot be decoded or does not fit what was agreed at handshake.

    The message always says what was wrong, so the learner can log it next to the peer's name.
    """

    message_type: str | None = None
    """set by `messages.decode` once the header named a known type ("handshake", "step", ...)"""


class VersionMismatch(ProtocolError):
    """A message from a peer of another protocol version: other code on the other side (an actor older or newer
    than the learner). `theirs`: the version its header named; `message_type`: the type it named (unchecked)."""

    def __init__(self, theirs, ours: int, message_type):
        super().__init__(f"protocol version {theirs!r} does not match ours ({ours})")
        self.theirs, self.ours = theirs, ours
        self.message_type = message_type if isinstance(message_type, str) else None
