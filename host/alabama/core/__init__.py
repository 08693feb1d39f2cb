"""The reference core: the responder side of the whole Alabama wire (spec §3, §4, §6–§13).

Layers, each knowing nothing of the one above it:

* ``state``       — stream/request lifecycle as one transition table (no I/O, no protobuf).
* ``surface``     — the satellite's Hello parsed and checked (R8.2-a/d, limits), the guest surface;
  ``schema``      — tool input schemas and event metadata checked with the jsonschema library (R8.2-d/e).
* ``events``      — what a session reports to its driver (one class per event).
* ``session``     — ``CoreSession``: one connection, sans-IO (frames in → frames + events out), made of
  ``inbound``     — what each satellite frame does; ``outbound`` — the core's sends;
  ``outqueue``    — the frames waiting for the writer; ``sessiondefs`` — the phases, limits, ``Admission``.
* ``conformance`` — the per-session violation report the HIL bench asserts on; ``errors`` — local vs remote.
* ``registry``    — SQLite device registry and pairing tokens; ``admission`` — §7.3 against it.
* ``images``      — fitting a picture to a panel, and the inline/stream budget a session has for it (R10.5-a).
* ``deferred``    — the store of partial DEFERRED captures (R10.4-d resume).
* ``pipeline``    — the pluggable voice pipeline (endpoint detector, brains, resampler).
* ``hearing``     — the speech brain and the wake phrase on ambient captures (alabama.speech underneath);
  ``spotting``    — the wake-phrase spotters in worker processes.
* ``connection``  — one accepted connection: the transport's bytes in, the session's frames out.
* ``server``      — ``CoreServer``: the asyncio driver (Noise over TCP, pacing, registry, API);
  ``control``     — its loopback control endpoint; ``workers`` — several server processes on one port.
* ``testsat``     — a scriptable host-side test satellite that can also misbehave on purpose.
* ``cli``         — ``alabama core serve|key|token|devices|approve|invoke|...``.
"""

#: The brains ``alabama core serve --brain`` offers (pipeline.make_brain builds them): echo speaks back what it
#: heard, espeak says how long it listened, speech hears (pocketsphinx + intents, hearing.SpeechBrain).
BRAINS = ("echo", "espeak", "speech")
