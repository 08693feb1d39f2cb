"""Long run: N back-to-back voice exchanges on one session; the board's free heap and the reply latency
must stay flat (a leak or a slowly filling buffer shows up here before it shows up on a desk)."""
import statistics

import pytest

from alabama.hil import measures, steps

#: Free heap may wander by this much between the first and the last exchanges (GC timing, fragmentation).
HEAP_SLACK_BYTES = 24 * 1024


@pytest.mark.spec("§4.1", "R10.8-a")
@pytest.mark.needs("mic", "speaker", "heap")
def test_long_run_back_to_back(hil):
    """N exchanges back to back (``--long-runs``, default 10): every one completes with its terminals; free heap
    after the last is within 24 KiB of after the first; the median reply latency of the last third is within
    3x (+100 ms) of the first third's."""
    n = max(3, getattr(hil, "long_runs", 10))
    hil.start_core(brain=steps.ToneBrain(400))
    hil.provision("ik")
    hil.boot()
    wav = steps.utterance_wav(hil.workdir / "utterance.wav", speech_ms=400, silence_ms=900)
    lat, heap = [], []
    for i in range(n):
        hil.target.set_mic(wav)
        ex = steps.requested_exchange(hil, "run-%d" % i)
        lat.append(measures.reply_latency(hil.tl, ex["co"].id))
        heap.append(hil.sample_heap())
        hil.measure("reply_latency_ms", 1000 * lat[-1])
    for _, d in measures.exchanges(hil.tl):
        hil.measure("exchange_ms", 1000 * d)
    if heap[0] is not None:
        drift = heap[0] - min(heap[1:] or heap)
        hil.measure("heap_drift_bytes", drift)
        assert drift <= HEAP_SLACK_BYTES, "free heap fell by %d bytes over %d exchanges: %s" % (drift, n, heap)
    k = max(1, n // 3)
    first, last = statistics.median(lat[:k]), statistics.median(lat[-k:])
    assert last <= 3 * first + 0.1, "reply latency grew from %.0f ms to %.0f ms" % (1000 * first, 1000 * last)
    hil.assert_conformant()
