"""`alabama conformance`: conformance kits that score a core or a satellite, the shared fixtures, and firmware code
run under the real micropython as a filter for differential tests.

``corekit.py`` scores a core (a scripted satellite), ``satkit.py`` a satellite (a scripted core); ``probes.py`` holds
the wire probes both run, ``rows.py`` the verdicts and their renderings; ``fixtures.py`` generates ``conformance/``
(Envelopes and frame streams as data); ``codec_echo.py`` is the firmware-side filter script (it runs under
micropython, not CPython); ``cli.py`` the commands and the record helpers; ``corpus.py`` builds random valid
Envelopes from the pb2 descriptors within the alabama.options bounds.
"""
