# Noise protocol pieces for the firmware: AEAD, HKDF (and the handshake built on them).
