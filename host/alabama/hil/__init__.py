"""The HIL bench: one scenario suite for the virtual board and a real board, the reference core as oracle.

* ``plugin``    — the pytest plugin (``--board sim|PORT``, ``--board-type``, ``--report``; the ``hil`` fixture).
* ``bench``     — one scenario's bench: core up, board provisioned and booted, expectations, teardown.
* ``corehost``  — the reference core on its own thread behind a relay that can go silent or cut.
* ``targets``   — the board under test: the virtual board (micropython) or a real board on a serial port.
* ``timeline``  — every frame both ways, as the spec's §4 listings show them.
* ``measures``  — latencies, handshakes, drops read off a timeline.
* ``report``    — self-contained HTML + JUnit XML + measurement history.
* ``mutants``   — deliberately broken firmware builds that prove the scenarios can fail.
* ``scenarios`` — the suite (pytest modules), run by ``alabama hil``.
"""
