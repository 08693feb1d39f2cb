"""Issue 40 part 2 / issue 37 part 5: tools/speech/wake_quality.py's corpus is reproducible from its seed (a small
slice), and its measurement (hits -> detections, false accepts per hour) is right on a tiny synthetic case."""
import importlib.util
import pathlib
import re
import shutil

import numpy as np
import pytest

from alabama.speech import BYTES_PER_SECOND, SAMPLE_RATE

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def wq():
    import sys
    sys.path.insert(0, str(ROOT / "tools" / "speech"))
    spec = importlib.util.spec_from_file_location("wake_quality", ROOT / "tools" / "speech" / "wake_quality.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


needs_espeak = pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("sox")),
                                  reason="espeak-ng and sox make the corpus")


def _take(gen, n):
    return [next(gen) for _ in range(n)]


def test_issue40_plans_are_the_seeds(wq):
    assert wq.positive_plan(40, "okay_nabu", 30) == wq.positive_plan(40, "okay_nabu", 30)
    assert wq.positive_plan(40, "okay_nabu", 30) != wq.positive_plan(41, "okay_nabu", 30)
    assert _take(wq.negative_plan(40), 50) == _take(wq.negative_plan(40), 50)
    assert _take(wq.negative_plan(40), 50) != _take(wq.negative_plan(41), 50)


def test_issue40_positives_cover_voices_speeds_pitches_and_every_snr(wq):
    clips = wq.positive_plan(40, "hey_jarvis", 324)
    assert {c.text for c in clips} == {"hey jarvis"}
    assert [sum(c.snr == s for c in clips) for s in (20, 10, 5)] == [108, 108, 108]
    assert len({c.voice for c in clips}) >= 20 and len({c.speed for c in clips}) >= 3
    assert len({c.pitch for c in clips}) >= 3 and {c.noise for c in clips} == set(wq.NOISES)


def test_issue40_negatives_are_speech_in_many_voices_near_misses_overlaps_noise_and_tones(wq):
    segs = _take(wq.negative_plan(40), 400)
    assert {k for k, _ in segs} == {"speech", "overlap", "noise", "tones"}
    speech = [c for _, clips in segs for c in clips if c.text]
    assert len({c.voice for c in speech}) >= 20
    assert any(m in c.text for c in speech for m in wq.NEAR_MISS)
    assert all(len(clips) == 2 for k, clips in segs if k == "overlap")
    for phrase in ("okay nabu", "hey jarvis", "alexa", "hey mycroft", "hey alabama"):   # no wake phrase itself
        assert not any(re.search(r"\b%s\b" % phrase, c.text.lower()) for c in speech), phrase   # "alexander" is


@needs_espeak
def test_issue40_the_corpus_bytes_are_the_seeds(wq, tmp_path):
    """A small slice rendered twice (two positives, ~4 s of negatives) gives the same bytes; another seed does not."""
    def make(seed, d):
        d.mkdir()
        spans = wq.write_positives(d / "p.s16", seed, "alexa", 2)
        meta = wq.write_negatives(d / "n.s16", seed, 4.0)
        return spans, meta, (d / "p.s16").read_bytes(), (d / "n.s16").read_bytes()

    a, b, c = make(7, tmp_path / "a"), make(7, tmp_path / "b"), make(8, tmp_path / "c")
    assert a == b
    assert a[2] != c[2] and a[3] != c[3]
    assert a[1]["seconds"] >= 4.0 and len(a[3]) == a[1]["seconds"] * BYTES_PER_SECOND
    (s0, e0, snr0), (s1, e1, snr1) = a[0]
    assert (snr0, snr1) == (20, 10) and wq.NOISE_LEAD_S * 1000 == s0 < e0 < s1 < e1     # the default: in a room
    assert e1 * BYTES_PER_SECOND // 1000 <= len(a[2])


def test_issue40_the_published_corpus_puts_each_positive_in_a_room(wq):
    """The default (the published rows, `make wake-quality`) is ``--gap noise``; ``--gap silence`` stays
    measurable (the stress row)."""
    assert wq.GAPS == ("noise", "silence")
    import inspect
    assert inspect.signature(wq.write_positives).parameters["gap"].default == "noise"


@needs_espeak
def test_issue40_gap_noise_puts_each_clips_own_noise_before_its_phrase(wq, tmp_path):
    """``--gap noise`` (the default): no digital silence between positives; each clip's noise starts
    NOISE_LEAD_S before the span scored (so a hit in that lead is not a detection), and the same phrases are
    spoken as with ``--gap silence`` (1 s of zeros after each clip, its spans back to back with those gaps)."""
    quiet = wq.write_positives(tmp_path / "s.s16", 7, "alexa", 2, "silence")
    noisy = wq.write_positives(tmp_path / "n.s16", 7, "alexa", 2)
    pcm = np.frombuffer((tmp_path / "n.s16").read_bytes(), "<i2")
    runs = np.flatnonzero(np.diff(np.flatnonzero(pcm == 0)) == 1)          # consecutive zero samples
    assert len(runs) < SAMPLE_RATE // 100                                   # never 10 ms of zeros in a row
    lead_ms = int(wq.NOISE_LEAD_S * 1000)
    assert noisy[0][0] == lead_ms and [e - s for s, e, _ in noisy] == [e - s for s, e, _ in quiet]
    assert noisy[1][0] - noisy[0][1] == lead_ms and [x[2] for x in noisy] == [20, 10]
    assert quiet[0][0] == 0 and quiet[1][0] - quiet[0][1] == int(wq.GAP_S * 1000)
    with pytest.raises(ValueError):
        wq.write_positives(tmp_path / "x.s16", 7, "alexa", 1, "music")


def test_issue40_detected_counts_a_hit_inside_a_clip_or_within_the_slack(wq):
    spans = [[1000, 2000, 20], [5000, 6000, 10], [9000, 10000, 5], [13000, 14000, 5]]
    # clip 0: a hit inside; clip 1: 900 ms after its end (slack 1000); clip 2: 1100 ms after (missed, and
    # before clip 3); clip 3: nothing; a hit before clip 0 and one far after the last count for none
    hits = [500, 1500, 6900, 11100]
    assert wq.detected(spans, hits, slack_ms=1000) == [True, True, False, False]
    assert wq.detected(spans, hits, slack_ms=1200) == [True, True, True, False]
    assert wq.detected(spans, [1500, 1600]) == [True, False, False, False]    # one hit, one clip
    assert wq.detected([[1000, 2000, 20], [2500, 3000, 20]], [2700]) == [False, True]   # the later clip's hit
    assert wq.detected([[1000, 2000, 20], [2500, 3000, 20]], [2400]) == [True, False]
    assert wq.by_snr(spans, [True, True, False, True]) == {"20": [1, 1], "10": [1, 1], "5": [1, 2]}
    assert wq.per_hour(3, 1800.0) == 6.0


class _Burst:
    """A detector that fires on a chunk louder than 10,000 (and restarts): the measurement's stand-in engine."""

    def __init__(self, cfg):
        self.closed = False

    def feed(self, data):
        return "hit" if np.abs(np.frombuffer(data, "<i2")).max(initial=0) > 10000 else None

    def close(self):
        self.closed = True


def test_issue40_run_stream_times_hits_and_honours_the_limit(wq, tmp_path, monkeypatch):
    """Loud 50 ms bursts at 1.0 s, 2.5 s and 7.0 s of a 10 s stream: hits at the end of their 0.1 s chunks;
    limited to 5 s the third is not fed; the positives scored from them are the bursts' clips."""
    x = np.zeros(10 * SAMPLE_RATE, "<i2")
    for t in (1.0, 2.5, 7.0):
        x[int(t * SAMPLE_RATE):int((t + 0.05) * SAMPLE_RATE)] = 20000
    path = tmp_path / "s.s16"
    path.write_bytes(x.tobytes())
    monkeypatch.setattr(wq, "open_engine", _Burst)
    hits, secs, cpu = wq.run_stream({}, path)
    assert hits == [1100, 2600, 7100] and secs == 10.0 and cpu >= 0
    hits5, secs5, _ = wq.run_stream({}, path, limit_s=5)
    assert hits5 == [1100, 2600] and secs5 == 5.0
    spans = [[800, 1200, 20], [4000, 5000, 10], [6500, 7000, 5]]
    assert wq.detected(spans, hits) == [True, False, True]
    assert wq.per_hour(len(hits5), secs5) == 2 * 720.0


def test_issue40_neg_hours_are_seconds_per_engine(wq):
    assert wq.neg_seconds("open=0.5,phrase=2") == {"open": 1800.0, "phrase": 7200.0}
    assert wq.neg_seconds("") == {}
    for bad in ("open", "nope=1", "open=0", "open=x"):
        with pytest.raises(ValueError):
            wq.neg_seconds(bad)


def test_issue40_the_cli_refuses_an_unknown_engine_in_one_line(wq, capsys):
    with pytest.raises(SystemExit) as e:
        wq.main(["--engines", "micro,nope"])
    assert e.value.code == 2
    assert "unknown engine or word nope" in capsys.readouterr().err


def test_issue40_frontend_spec_and_the_frontend_keeps_the_stream_in_step(wq):
    """``--frontend AGC,NS``: parsed and range-checked; the WebRTC front end returns every 10 ms it was given,
    across batches that are not multiples of 10 ms (the remainder waits for the next batch)."""
    assert wq.frontend_spec("31,2") == (31, 2)
    for bad in ("32,0", "0,5", "x", "1"):
        with pytest.raises(ValueError):
            wq.frontend_spec(bad)
    pytest.importorskip("webrtc_noise_gain", reason="pip install webrtc-noise-gain")
    fe = wq.Frontend((31, 0))
    pcm = (np.sin(np.arange(16000) / 5.0) * 300).astype("<i2").tobytes()
    out = fe(pcm[:1000]) + fe(pcm[1000:5000]) + fe(pcm[5000:])
    assert len(out) == len(pcm) - len(pcm) % 320 and len(fe.tail) == len(pcm) % 320
    assert np.abs(np.frombuffer(out[-3200:], "<i2")).max() > 300        # the gain raised the quiet tone


def test_issue40_variants_give_the_keyphrase_spotter_its_phrases_pronunciation_variants(wq):
    pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx")
    from alabama.speech import spotter
    plain, var = wq.engine_config("phrase", "hey_alabama"), wq.engine_config("phrase", "hey_alabama", True)
    assert plain["pronunciations"] == {} and not plain["variants"]
    assert var["pronunciations"] == wq.VARIANTS and var["variants"]
    assert wq.engine_config("phrase", "okay_nabu", True)["pronunciations"] == {"nabu": "N AA B UW"}
    assert plain["threshold"] == var["threshold"] == spotter.DEFAULT_THRESHOLD          # the cutoff is not moved
    assert len(wq.open_engine(var)._d.get_kws("wake").split("\n")) == 6


def test_issue40_the_docs_table_is_made_from_the_json_reports(wq, tmp_path, capsys):
    """``--table``: one row per result, wake words and engines in order, the stress arrangement and the
    spotter's variants named; a file that is not a report is one usage line."""
    def res(engine, word, fa, snr, variants=False):
        return {"engine": engine, "word": word, "config": {"variants": variants}, "false_accepts": fa,
                "neg_seconds": 7200.0, "fa_per_hour": fa / 2.0, "detected": sum(snr), "positives": 324,
                "by_snr": {"20": [snr[0], 108], "10": [snr[1], 108], "5": [snr[2], 108]}, "cpu_xrt": 0.004,
                "wall_s": 50.0, "load": 3.0, "finished": "2026-12-05 19:20 UTC"}
    room = {"gap": "noise", "results": [res("phrase", "alexa", 444, (77, 71, 50)),
                                        res("micro", "alexa", 0, (87, 82, 81)),
                                        res("phrase", "hey_alabama", 966, (90, 99, 101), True)]}
    stress = {"gap": "silence", "results": [res("micro", "alexa", 0, (74, 90, 86))]}
    stress["results"][0].update(false_accepts=None, fa_per_hour=None, neg_seconds=0.0)    # --positives-only
    lines = wq.table([room, stress])
    assert lines[0] == wq.TABLE_HEAD and len(lines) == 6
    assert lines[2] == ("| alexa | microWakeWord | 0 (2.00 h) | 0.00 | 87 | 82 | 81 | 250 (77 %) | 0.0040 | "
                        "2026-12-05 19:20 UTC | 50.0 (3.0) |")
    assert lines[3].startswith("| alexa | microWakeWord (--gap silence) | not fed | – | 74 | 90 | 86 |")
    assert lines[4].startswith("| alexa | keyphrase spotter | 444 (2.00 h) | 222.00 | 77 | 71 | 50 |")
    assert lines[5].startswith("| hey_alabama | keyphrase spotter + variants | 966 (2.00 h) | 483.00 |")
    f = tmp_path / "r.json"
    f.write_text('{"seed": 40}')
    with pytest.raises(SystemExit) as e:
        wq.main(["--table", str(f)])
    assert e.value.code == 2 and "is not a report this tool wrote" in capsys.readouterr().err
