# Alabama wire layer: the frame codec (frame.py) and the generated Envelope codec.
