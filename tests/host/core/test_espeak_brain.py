"""The TTS brain: espeak-ng's reply reaches the satellite resampled exactly to its SpeakerParams."""
import asyncio
import shutil

import numpy as np
import pytest

from alabama.core import pipeline
from alabama.core.testsat import capture_open, env, mic_cap, silence, speaker_cap, tone
from alabama.errors import AlabamaError

from conftest import connect, make_server

ESPEAK = shutil.which("espeak-ng") or shutil.which("espeak")


@pytest.mark.skipif(not ESPEAK, reason="espeak-ng not installed (apt-get install espeak-ng; .ci/run installs it)")
def test_espeak_brain_speaks_a_reply_resampled_to_the_speaker(tmp_path, run):
    async def body():
        async with make_server(tmp_path, brain=pipeline.EspeakBrain()) as srv:
            sat = await connect(srv)
            r = await sat.hello(caps=[mic_cap(), speaker_cap(rate=16000, buffer_ms=300)])
            assert r.env.hello_response.WhichOneof("result") == "accepted"
            cid = sat.mint()
            await sat.send(capture_open(cid))
            seq = await sat.stream_audio(cid, tone(600), realtime=False)
            for _ in range(60):
                await sat.send(env(cid, "stream_chunk", seq=seq), silence(20))
                seq += 1
                if any(x.op == "stream_end" and x.id == cid for x in sat.received):
                    break
                await asyncio.sleep(0.005)
            mro = await sat.expect("media_render_open", timeout=10)
            assert mro.env.media_render_open.format.sample_rate == 16000
            await sat.expect("response", cid, timeout=20)
            audio = b"".join(c.tail for c in sat.received if c.op == "stream_chunk" and c.id == mro.id)
            pcm = np.frombuffer(audio, dtype="<i2").astype(np.float64)
            # "I heard 1.2 seconds of audio." spoken: about a second or more of speech, clearly not silence,
            # and not the echo of the 600 ms tone we sent
            assert len(pcm) > 16000 * 0.8
            assert np.sqrt(np.mean(pcm ** 2)) > 300
            await sat.close()
    run(body())


def test_espeak_brain_missing_is_one_line_saying_what_to_do(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(AlabamaError) as e:
        pipeline.EspeakBrain()
    assert "apt-get install espeak-ng" in str(e.value) and "\n" not in str(e.value)
