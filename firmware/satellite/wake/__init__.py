"""On-device wake word: the audio frontend (frontend.py) and int8 inference (model.py)."""
