"""Speech layer of the reference core: recognition, intents, wake-phrase spotting and Wyoming engines.

Responsible for turning 16 kHz s16le mono PCM into text, intents and wake-phrase hits, and for the
Wyoming protocol clients/server. Must not know about sessions, frames or the wire: the core's pipeline
feeds it bytes and reads plain results. ``load()`` is the one place that imports pocketsphinx, so a
missing install is one line saying how to fix it and the core falls back to the echo brain.
"""

SAMPLE_RATE = 16000
SAMPLE_WIDTH = 2
CHANNELS = 1
FRAME_BYTES = 640                 # 20 ms at 16 kHz s16le mono: what a board sends per StreamChunk
BYTES_PER_SECOND = SAMPLE_RATE * SAMPLE_WIDTH * CHANNELS

INSTALL_HINT = ("speech needs pocketsphinx: pip install pocketsphinx "
                "(or pip install 'alabama-satellite[speech]'); falling back to the echo brain")


class SpeechUnavailable(ImportError):
    """pocketsphinx (or its bundled model) cannot be loaded; str() is one line saying how to install it."""


def load():
    """Return the ``pocketsphinx`` module, or raise SpeechUnavailable with INSTALL_HINT as its one line."""
    try:
        import pocketsphinx
    except ImportError as e:
        raise SpeechUnavailable(INSTALL_HINT) from e
    return pocketsphinx
