"""The wire format shared by actors and the learner: msgpack headers plus raw numpy frames.
Beside it, the few small jobs both sides do alike: whole-file writes (files.py), watching the parent
process (processes.py).

Imports neither torch nor gymnasium: an actor in central-inference mode depends on this package only.
"""
from protocol.errors import ProtocolError
from protocol.messages import MAX_ENV_SLOTS, PROTOCOL_VERSION
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec

__all__ = ["MAX_ENV_SLOTS", "PROTOCOL_VERSION", "ProtocolError", "EnvSettings", "SpaceSpec"]
