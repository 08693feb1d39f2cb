"""The reference core: the responder side of the whole Alabama wire (spec §3, §4, §6–§13).

Layers, each knowing nothing of the one above it:

* ``state``       — stream/request lifecycle as one transition table (no I/O, no protobuf).
* ``surface``     — the satellite's Hello parsed and checked (R8.2-a/d, limits), the guest surface.
* ``session``     — ``CoreSession``: one connection, sans-IO (frames in → frames + events out).
* ``conformance`` — the per-session violation report the HIL bench asserts on.
* ``registry``    — SQLite device registry and pairing tokens (admission, §7.3).
* ``pipeline``    — the pluggable voice pipeline (endpoint detector, brains, resampler).
* ``hearing``     — the speech brain and the wake phrase on ambient captures (alabama.speech underneath).
* ``server``      — ``CoreServer``: the asyncio driver (Noise over TCP, pacing, control endpoint).
* ``testsat``     — a scriptable host-side test satellite that can also misbehave on purpose.
* ``cli``         — ``alabama core serve|key|token|devices|approve|invoke|...``.
"""

#: The brains ``alabama core serve --brain`` offers (pipeline.make_brain builds them): echo speaks back what it
#: heard, espeak says how long it listened, speech hears (pocketsphinx + intents, hearing.SpeechBrain).
BRAINS = ("echo", "espeak", "speech")
