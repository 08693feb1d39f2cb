"""Provisioning: what QR, sound (ggwave) and serial deliver to a satellite (``record`` = the codec)."""
