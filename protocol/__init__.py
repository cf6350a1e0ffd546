"""The wire format shared by actors and the learner: msgpack headers plus raw numpy frames.

Imports neither torch nor gymnasium: an actor in central-inference mode depends on this package only.
"""
from protocol.errors import ProtocolError
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec

PROTOCOL_VERSION = 1

__all__ = ["PROTOCOL_VERSION", "ProtocolError", "EnvSettings", "SpaceSpec"]
