# Noise protocol: X25519, ChaCha20-Poly1305, SHA-256 and the Noise state objects.
