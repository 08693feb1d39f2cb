"""`alabama conformance`: run firmware code under the real micropython as a filter, for differential tests.

``codec_echo.py`` is the firmware-side script (it runs under micropython, not CPython);
``cli.py`` starts it and holds the record helpers; ``corpus.py`` builds random valid Envelopes
from the pb2 descriptors within the alabama.options bounds.
"""
