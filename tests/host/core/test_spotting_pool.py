"""The wake-phrase spotters in worker processes (core/spotting.py): a hit is still found, with the audio after it;
a worker that dies is restarted and its streams spot again; one that keeps dying turns its streams' spotting off
(said, never a hang); dropping a stream and closing the pool never wait on a worker."""
import asyncio
import contextlib
import logging
import shutil

import pytest

pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx")
if not (shutil.which("espeak-ng") and shutil.which("sox")):
    pytest.skip("speech tests synthesize utterances: apt-get install espeak-ng sox", allow_module_level=True)

from alabama.core.hearing import Wake  # noqa: E402
from alabama.speech import FRAME_BYTES, audio  # noqa: E402

PHRASE = "hey alabama"


@pytest.fixture(scope="module")
def phrase_pcm():
    return audio.synth(PHRASE) + audio.silence(0.5)


async def _stream_until_hit(stream, pcm, hits, timeout=20.0):
    """Push ``pcm`` 20 ms at a time (no pacing: the worker answers as fast as it can), then silence, until a hit."""
    pushed = 0
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    for f in audio.frames(pcm):
        stream.push(f)
        pushed += len(f)
        await asyncio.sleep(0)
    while not hits and loop.time() < end:
        stream.push(audio.silence(0.02))
        pushed += FRAME_BYTES
        await asyncio.sleep(0.01)
    return pushed


@contextlib.asynccontextmanager
async def one_worker():
    """A Wake with one spotting process; closed at the end, and its processes then gone."""
    wake = Wake(PHRASE, processes=1)
    workers = wake.pool.workers
    try:
        yield wake
    finally:
        workers = wake.pool.workers or workers
        await asyncio.wait_for(wake.close(), 5)
        assert all(w.proc is None or w.proc.returncode is not None for w in workers)


async def _until(cond, timeout=30.0):
    """Poll ``cond`` every 10 ms; a generous bound (a worker process under a loaded CI machine: 5 s was not always
    enough to answer five batches), returning as soon as it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.01)


def test_hit_found_with_the_audio_after_it(run, phrase_pcm):
    async def main():
        hits = []
        async with one_worker() as wake:
            s = wake.feeder(None, hits.append)
            pushed = await _stream_until_hit(s, phrase_pcm, hits)
            assert hits, "no hit from the worker process"
            hit, rest = hits[0]
            assert hit.phrase == PHRASE
            # every byte pushed is either before the hit's frame (spotted), after it (rest), not sent yet, or
            # skipped because the worker was behind (a loaded machine: the backlog bound drops the oldest waiting)
            assert (hit.frame + 1) * FRAME_BYTES + len(rest) + len(s.pending) + s.skipped == pushed
            assert 1000 <= hit.end_ms <= 1000 * len(phrase_pcm) // 32000 + 200
            s.drop()
    run(main())


def test_dead_worker_is_restarted_and_spots_again(run, phrase_pcm):
    async def main():
        hits = []
        async with one_worker() as wake:
            s = wake.feeder(None, hits.append)
            await _stream_until_hit(s, audio.silence(0.2), [None])
            w = wake.pool.workers[0]
            await _until(lambda: w.proc is not None and not s.backlog())     # up and answering
            first = w.proc
            first.kill()
            # audio sent to the dead worker is lost: wait for the new one
            await _until(lambda: w.restarts == 1 and w.proc is not None and w.proc is not first)
            await _stream_until_hit(s, phrase_pcm, hits)
            assert hits, "no hit after the worker was restarted"
            assert w.proc is not first and w.restarts == 1 and not s.off
    run(main())


def test_worker_that_keeps_dying_turns_spotting_off(run, caplog):
    caplog.set_level(logging.WARNING, logger="alabama.core.spotting")
    async def main():
        async with one_worker() as wake:
            wake.pool.max_restarts = 0
            s = wake.feeder(None, lambda r: None)
            s.push(audio.silence(0.2))
            w = wake.pool.workers[0]
            await _until(lambda: w.proc is not None)
            w.proc.kill()
            await _until(lambda: s.off)
            assert w.dead
            s.push(audio.silence(1.0))           # ignored: nothing grows
            assert s.backlog() == 0
            later = wake.feeder(None, lambda r: None)   # a new ambient stream: off at once, not hung
            assert later.off
            s.drop()
    run(main())
    assert "spotting off" in caplog.text


def test_backlog_is_bounded_when_the_worker_is_behind(run):
    async def main():
        async with one_worker() as wake:
            s = wake.feeder(None, lambda r: None)
            w = wake.pool.workers[0]
            await _until(lambda: w.proc is not None)
            w.proc.send_signal(19)               # SIGSTOP: a worker that stops answering
            try:
                for _ in range(500):             # 10 s of audio pushed at once
                    s.push(audio.silence(0.02))
                limit = wake.pool.max_backlog_bytes
                assert s.backlog() <= 2 * limit and s.skipped > 0
            finally:
                w.proc.send_signal(18)           # SIGCONT
            s.drop()
    run(main())


def test_a_dropped_stream_frees_its_spotter_in_the_worker(run):
    """Bounded over hours of ambient turns (each turn drops the ambient stream, the board resumes on a new id):
    the worker holds one spotter per live stream, never one per stream ever opened. STATS is what
    tools/soak/ambient.py samples (docs/soak.md, "Ambient")."""
    async def main():
        async with one_worker() as wake:
            pool = wake.pool
            kept = wake.feeder(None, lambda r: None)
            for _ in range(3):                        # three turns: open, spot a little, drop
                s = wake.feeder(None, lambda r: None)
                s.push(audio.silence(0.2))
                await _until(lambda: not s._inflight_bytes)
                s.drop()
            (st,) = await pool.stats()
            assert st["spotters"] == 1 and st["rss_kb"] > 0 and st["blocks"] > 0
            assert st["pid"] == pool.workers[0].proc.pid
            kept.drop()
            (st,) = await pool.stats()
            assert st["spotters"] == 0
    run(main())


def test_a_workers_batches_go_to_it_in_one_write_and_come_back_answered(run):
    """Issue 40's capacity: the batches several streams send within FLUSH_S reach their worker in one pipe write
    (not one write, and one wake-up of the worker, per batch), and every one is answered."""
    async def main():
        async with one_worker() as wake:
            streams = [wake.feeder(None, lambda r: None) for _ in range(5)]
            w = wake.pool.workers[0]
            await _until(lambda: w.proc is not None and not w._out and not w._flush_at)   # the OPENs are out
            writes = []
            orig = w.proc.stdin.write
            w.proc.stdin.write = lambda data: (writes.append(len(data)), orig(data))[1]
            for s in streams:
                s.push(audio.silence(0.1))       # one batch each, all in this tick
            assert all(s._inflight_bytes for s in streams)
            await _until(lambda: not any(s.backlog() for s in streams))
            assert len(writes) == 1 and writes[0] > 5 * 3200
            for s in streams:
                s.drop()
    run(main())


def test_the_worker_answers_all_that_one_read_brought_in_one_write():
    """The worker's side: every FEED one read brought is answered, in order, with one flush for all of them."""
    import io
    import json

    from alabama.core import spotting as SP
    from alabama.speech import wakeword as W

    cfg = json.dumps(W.choose(phrase=PHRASE, check=False)).encode()
    msgs = SP.HDR.pack(SP.OPEN, 7, 0, len(cfg)) + cfg
    for seq in range(1, 6):
        msgs += SP.HDR.pack(SP.FEED, 7, seq, 3200) + bytes(3200)

    class Out(io.BytesIO):
        flushes = 0

        def flush(self):
            Out.flushes += 1

    out = Out()
    assert SP.worker_main(io.BytesIO(msgs), out) == 0
    got, data = [], out.getvalue()
    while data:
        op, sid, seq, n = SP.HDR.unpack_from(data)
        got.append((op, sid, seq))
        data = data[SP.HDR.size + n:]
    assert got == [(SP.FED, 7, seq) for seq in range(1, 6)] and Out.flushes == 1


def test_the_workers_yield_the_cpu_to_the_cores_frame_path(run):
    """A frame has 20 ms, a stream's spotting 2 s of slack: the spotting processes run WORKER_NICE nicer than
    the core, so a busy machine delays spotting, not frames."""
    import os

    from alabama.core.spotting import WORKER_NICE

    async def main():
        async with one_worker() as wake:
            s = wake.feeder(None, lambda r: None)
            w = wake.pool.workers[0]
            await _until(lambda: w.proc is not None)
            s.push(audio.silence(0.1))
            await _until(lambda: not s.backlog())                  # up and answering
            assert os.getpriority(os.PRIO_PROCESS, w.proc.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICE)
            s.drop()
    run(main())
