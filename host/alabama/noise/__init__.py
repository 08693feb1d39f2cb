"""Noise (rev 34, IK/XX 25519/ChaChaPoly/SHA256) and the Noise-over-TCP binding for the host.

``state`` holds the Noise state objects, ``transport`` the sans-IO binding (spec §5.1), ``aio`` a
thin asyncio driver. Nothing here imports the firmware package.
"""
from .state import (HandshakeError, HandshakeState, MAX_MESSAGE, MAX_PLAINTEXT, NoiseError,
                    NoiseStateError, TransportError, protocol_name, public_key)
from .transport import NoiseConnection, PROTOCOL_NAMES

__all__ = ["HandshakeError", "HandshakeState", "MAX_MESSAGE", "MAX_PLAINTEXT", "NoiseConnection",
           "NoiseError", "NoiseStateError", "PROTOCOL_NAMES", "TransportError", "protocol_name",
           "public_key"]
