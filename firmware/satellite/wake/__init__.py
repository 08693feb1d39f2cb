"""On-device wake word: the audio frontend (frontend.py), int8 inference (model.py), the detector that joins them
(detector.py); here only where the deployed model files are (MODEL_DIR) and their names, which the settings table
reads at boot without loading the engine."""
# Deploy puts the compiled models here as <name>.aww, relative to the board's root: outside lib/satellite, which a
# module-set OTA swaps whole (otaboot), so an update keeps them.
MODEL_DIR = "wake"
SUFFIX = ".aww"


def deployed(d=MODEL_DIR):
    """The names of the model files deployed in d, sorted (empty when there is none)."""
    import os
    try:
        names = os.listdir(d)
    except OSError:
        return []
    out = [n[:-len(SUFFIX)] for n in names if n.endswith(SUFFIX)]
    out.sort()
    return out
