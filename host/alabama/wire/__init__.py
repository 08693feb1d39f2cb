"""Alabama wire layer for the host: the frame codec (frame.py) and the generated Envelope codec."""
