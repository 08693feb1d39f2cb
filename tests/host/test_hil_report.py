"""The HIL bench's pure parts: timeline rows, measurements, and the report (HTML, JUnit, history, browser)."""
import json
import math
import pathlib
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from alabama.core import testsat as T
from alabama.hil import measures, report
from alabama.hil.timeline import CORE_TO_SAT, NOTE, SAT_TO_CORE, FrameEvent, Timeline, collapse, describe
from alabama.v1 import envelope_pb2, operations_pb2 as ops
from alabama.wire import frame as wire


def _rows(spec):
    return [FrameEvent(t, d, op, i, seq, 4, tail, summary).as_dict() for t, d, op, i, seq, tail, summary in spec]


# ------------------------------------------------------------------------------------------ timeline
def test_describe_names_fields_like_the_spec_listing():
    op, id_, seq, summary, _ = describe(T.capture_open(1, trigger=ops.WAKEWORD).SerializeToString(), 0)
    assert (op, id_, seq) == ("capture_open", 1, None)
    assert "AUDIO" in summary and "WAKEWORD" in summary and "LIVE" in summary   # LIVE is proto3's zero
    e = envelope_pb2.Envelope(id=2)
    e.pipeline_state.SetInParent()
    assert describe(e.SerializeToString(), 0)[3] == "IDLE"
    op, id_, seq, summary, _ = describe(T.env(1, "stream_chunk", seq=7).SerializeToString(), 640)
    assert (op, id_, seq, summary) == ("stream_chunk", 1, 7, "seq 7 +640 B")


def test_describe_flags_unknown_arms_and_fields():
    hdr = wire.varint(1 << 3) + wire.varint(4) + wire.varint(117 << 3 | 2) + b"\x02hi"
    op, id_, _, summary, _ = describe(hdr, 0)
    assert (op, id_) == ("unknown_arm", 4) and "117" in summary
    ping = T.env(6, "ping", t1=5).SerializeToString() + wire.varint(2000 << 3) + b"\x01"
    op, _, _, summary, _ = describe(ping, 0)
    assert op == "ping" and summary.endswith("(+unknown fields)")
    assert describe(b"\xff\xff", 0)[0] == "undecodable"


def test_timeline_wait_and_recorder_reframe_any_split():
    from alabama.hil.timeline import StreamRecorder
    tl = Timeline()
    rec = StreamRecorder(tl, SAT_TO_CORE, "s1")
    data = b"".join(T.frame(T.env(1, "stream_chunk", seq=i), b"\x00" * 100) for i in range(5))
    for k in range(0, len(data), 7):      # 7-byte pieces: frames split everywhere
        rec.feed(data[k:k + 7])
    assert [e.seq for e in tl.find(SAT_TO_CORE, "stream_chunk")] == [0, 1, 2, 3, 4]
    assert tl.wait(SAT_TO_CORE, "stream_chunk", pred=lambda e: e.seq == 4, timeout=0.1).tail == 100
    assert tl.wait(CORE_TO_SAT, "ping", timeout=0.05) is None


def test_collapse_keeps_first_last_and_counts_the_middle():
    rows = _rows([(0.0, SAT_TO_CORE, "capture_open", 1, None, 0, "")]
                 + [(0.02 * i, SAT_TO_CORE, "stream_chunk", 1, i, 640, "") for i in range(50)]
                 + [(1.0, CORE_TO_SAT, "stream_end", 1, None, 0, "END_DETECTED")])
    out = collapse(rows)
    assert [r["op"] for r in out] == ["capture_open", "stream_chunk", "stream_chunk", "...", "stream_chunk",
                                      "stream_end"]
    assert "47 more chunks, seq 2-48, 30080 B" in out[3]["summary"]
    pings = _rows([(0.5 * i, SAT_TO_CORE if i % 2 else CORE_TO_SAT, "ping" if i % 4 < 2 else "ping_response",
                    i + 1, None, 0, "") for i in range(12)] + [(9.0, CORE_TO_SAT, "response", 3, None, 0, "")])
    out = collapse(pings)
    assert [r["op"] for r in out][2] == "..." and len(out) == 6 and out[-1]["op"] == "response"
    assert out[2]["summary"] == "8 Ping/PingResponse frames over 3.5 s"


# ------------------------------------------------------------------------------------------ measures
def test_measures_on_a_synthetic_exchange():
    rows = _rows([
        (0.10, NOTE, "note", 0, None, 0, "board connects (TCP #1)"),
        (0.16, CORE_TO_SAT, "hello_response", 1, None, 0, "accepted {...}"),
        (1.00, SAT_TO_CORE, "capture_open", 3, None, 0, ""),
        (1.02, SAT_TO_CORE, "stream_chunk", 3, 0, 640, ""),
        (1.04, SAT_TO_CORE, "stream_chunk", 3, 1, 640, ""),
        (1.06, SAT_TO_CORE, "stream_chunk", 3, 3, 640, ""),     # seq 2 missing
        (1.08, SAT_TO_CORE, "stream_chunk", 3, 4, 640, ""),
        (1.10, SAT_TO_CORE, "stream_chunk", 3, 5, 640, ""),
        (1.50, SAT_TO_CORE, "stream_chunk", 3, 6, 640, ""),     # 400 ms after the previous: late
        (1.60, CORE_TO_SAT, "stream_end", 3, None, 0, "END_DETECTED"),
        (1.85, CORE_TO_SAT, "media_render_open", 2, None, 0, ""),
        (1.86, CORE_TO_SAT, "stream_chunk", 2, 0, 640, ""),
        (2.00, CORE_TO_SAT, "stream_cancel", 2, None, 0, "BARGE_IN"),
        (2.03, SAT_TO_CORE, "playback_done", 2, None, 0, "frames 320"),
        (2.10, CORE_TO_SAT, "response", 3, None, 0, ""),
    ])
    assert measures.handshakes(rows) == pytest.approx([0.06])
    assert measures.reply_latency(rows, 3) == pytest.approx(0.26)
    assert measures.reply_latency(rows, 3, board_play_t=1.95) == pytest.approx(0.35)
    assert measures.cancel_to_done(rows, 2) == pytest.approx(0.03)
    assert measures.capture_stats(rows) == (1, 1)
    assert measures.exchanges(rows) == [(3, pytest.approx(1.1))]


# ------------------------------------------------------------------------------------------ report
def _wav(path, seconds=1.0, rate=16000):
    from alabama.hil import steps
    t = np.arange(int(rate * seconds)) / rate
    return steps.write_wav(path, 12000 * np.sin(2 * math.pi * 220 * t))


def test_wave_svg_draws_the_envelope():
    x, rate = report.read_wav(_wav(pathlib.Path(__import__("tempfile").mkdtemp()) / "a.wav", 0.5))
    assert len(x) == 8000 and rate == 16000 and abs(x.max() - 12000 / 32768) < 1e-3
    svg = report.wave_svg(x, rate)
    assert svg.startswith("<svg") and "<polygon" in svg and "0.50 s, peak 37%" in svg
    assert "no samples" in report.wave_svg([], 16000)


def _run(run_id, tmp, outcome="failed", latency=120.0):
    rows = _rows([(0.0, NOTE, "note", 0, None, 0, "board connects (TCP #1)"),
                  (0.05, SAT_TO_CORE, "hello", 1, None, 0, "wire_version 1"),
                  (0.06, CORE_TO_SAT, "hello_response", 1, None, 0, "accepted {}")]
                 + [(0.1 + 0.02 * i, SAT_TO_CORE, "stream_chunk", 3, i, 640, "seq %d +640 B" % i) for i in range(30)])
    viol = {"session": "s1", "noise_pattern": "IK", "admission": "known_paired", "frames_in": 40, "frames_out": 9,
            "close_reason": "peer closed", "violations": [{"rule": "R6.3-a", "check": "id_parity",
                                                            "detail": "even id <4>", "frame": 3}]}
    return {"run_id": run_id, "started": 1764676000.0, "duration": 12.5, "board": "sim", "board_type": "sim",
            "core_address": "127.0.0.1:1234", "firmware": "abc123", "host": "test",
            "scenarios": [
                {"nodeid": "s::test_a", "name": "test_a_voice", "module": "test_s4_examples", "doc": "A voice <exchange>.",
                 "requirements": ["§4.1"], "outcome": "passed", "duration": 2.0, "message": "",
                 "timeline": rows, "conformance": [], "measurements": {"reply_latency_ms": [latency, latency + 10]},
                 "heap": [[0.0, 200000], [1.0, 199000]], "waves": [{"title": "heard", "path": _wav(tmp / "m.wav")}],
                 "serial_log": "sat: hello\nsat: <accepted>\n", "notes": []},
                {"nodeid": "s::test_b", "name": "test_b_limits", "module": "test_limits", "doc": "", "requirements": [],
                 "outcome": outcome, "duration": 1.0, "message": "AssertionError: frame too large",
                 "timeline": [], "conformance": [viol], "measurements": {"handshake_ms": 40.0}, "heap": [],
                 "waves": [], "serial_log": "", "notes": []}]}


def test_report_html_junit_and_history(tmp_path):
    p1 = report.write(_run("run-1", tmp_path, latency=120.0), tmp_path / "rep")
    p2 = report.write(_run("run-2", tmp_path, latency=150.0), tmp_path / "rep")
    hist = json.loads((tmp_path / "rep" / "history.json").read_text())["runs"]
    assert [r["run_id"] for r in hist] == ["run-1", "run-2"]
    assert hist[1]["measurements"]["reply_latency_ms"] == 155.0 and hist[1]["counts"]["failed"] == 1
    page = p2["html"].read_text()
    assert p2["latest_html"].read_text() == page and p1["html"].exists()
    for needle in ("test_a_voice", "test_b_limits", "A voice &lt;exchange&gt;.", "badge failed", "<polygon",
                   "R6.3-a id_parity", "27 more chunks, seq 2-28", "sat: &lt;accepted&gt;",
                   "capture end \u2192 first reply sample", "(+30.0)", "Sat \u2192 Core"):
        assert needle in page, needle
    assert "<script" not in page and "http" not in page.split("</style>")[0]     # self-contained, no fetches
    suite = ET.parse(p2["junit"]).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["test_b_limits"].find("failure").get("message") == "AssertionError: frame too large"
    assert cases["test_a_voice"].find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["median.reply_latency_ms"] == "155"


def test_history_survives_a_corrupt_file(tmp_path):
    (tmp_path / "history.json").write_text("{not json")
    report.write(_run("r", tmp_path), tmp_path)
    assert len(report.load_history(tmp_path)) == 1


@pytest.mark.skipif(report.find_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(tmp_path):
    paths = report.write(_run("render", tmp_path), tmp_path / "rep")
    png = paths["html"].with_name("report.png")
    r = report.screenshot(paths["html"], png, height=1600)
    assert r.returncode == 0, r.stderr[-500:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    dom = report.dump_dom(paths["html"])
    assert "test_b_limits" in dom and "<svg" in dom


def test_band_ratio_tells_a_heard_probe_from_noise():
    from alabama.hil import steps
    rng = np.random.default_rng(3)
    noise = (3000 * rng.standard_normal(16000)).astype("<i2").tobytes()
    probe = np.frombuffer(steps.tone(1000, 1000.0, amp=6000), dtype="<i2").astype(np.float64)
    mixed = np.clip(probe + np.frombuffer(noise, dtype="<i2")[: len(probe)] * 0.3, -32768, 32767).astype("<i2")
    assert steps.band_ratio(noise) < 0.1
    assert steps.band_ratio(mixed.tobytes()) > 0.5
    assert steps.band_ratio(steps.tone(1000, 1500.0)) < 0.01
    assert steps.band_ratio(b"\x00\x00" * 100) == 0.0


def test_report_shows_each_devices_health(tmp_path):
    """The run page and the scenario carry a Device health table: one row per device (device.info or its
    device.health Event, docs/ota.md)."""
    run = _run("run-h", tmp_path)
    run["scenarios"][0]["health"] = {
        "9437f2cd241f133eb8541cf745ba4271": {"firmware": "0.2.0", "firmware_digest": "5a62675e883a" + "0" * 52,
                                             "uptime_ms": 81234, "heap_free": 90112, "heap_min": 61440, "rssi": -67,
                                             "reset_reason": "ota", "crash_count": 2, "reconnect_count": 1,
                                             "frames_dropped": 7, "source": "device.info",
                                             "ota": {"state": "rolled_back", "error": "did not reach a session"}},
        "00aa11bb22cc33dd44ee55ff66778899": {"firmware": "0.1.0", "digest": "77" * 32, "rssi": None,
                                             "heap_min": 1000, "crash_count": 0, "ota": "ok", "source": "event"}}
    page = report.write(run, tmp_path / "rep")["html"].read_text()
    assert page.count("<h2>Device health</h2>") == 1 and "<h3>Device health</h3>" in page
    for needle in ("9437f2cd241f133e", "5a62675e883a", "-67", "81234", "rolled_back: did not reach a session",
                   "00aa11bb22cc33dd", "777777777777", "event", "<td>7</td>"):
        assert needle in page, needle
    assert "no device health recorded" not in page.split("<h2>Measurements</h2>")[0]
    empty = report.write(_run("run-e", tmp_path), tmp_path / "rep2")["html"].read_text()
    assert "no device health recorded" in empty


def test_report_shows_transcripts_beside_waveforms_and_the_wer(tmp_path):
    """The intelligibility scenario's evidence: each transcript under its waveform, the WER titled."""
    run = _run("run-t", tmp_path)
    sc = run["scenarios"][0]
    sc["waves"] = [{"title": "what the board heard (mic input)", "path": _wav(tmp_path / "src.wav"),
                    "transcript": "what time is it"},
                   {"title": "capture 5 as the core received it", "path": _wav(tmp_path / "cap.wav"),
                    "transcript": "what <time>"}]
    sc["measurements"]["speech_wer"] = [0.5]
    page = report.write(run, tmp_path / "rep")["html"].read_text()
    figs = page.split('<div class="fig">')[1:]
    assert "what the board heard" in figs[0] and "heard: &ldquo;what time is it&rdquo;" in figs[0]
    assert "<svg" in figs[0].split("heard: &ldquo;")[0]           # the transcript comes after its waveform
    assert "heard: &ldquo;what &lt;time&gt;&rdquo;" in figs[1]
    assert "word error rate, source vs through the board" in page


def test_word_error_rate():
    word_error_rate = measures.word_error_rate
    assert word_error_rate("what time is it", "what time is it") == 0.0
    assert word_error_rate("what time is it", "what time it") == 0.25
    assert word_error_rate("what time is it", "thank") == 1.0
    assert word_error_rate("", "") == 0.0 and word_error_rate("", "a") == 1.0


def test_speaker_out_feeds_a_real_boards_mic_and_is_refused_for_the_virtual_board():
    """--speaker-out: a real board gets the mic_feed feature (intelligibility scenarios run), none without it
    (they are skipped, saying to pass it); the virtual board hears its WAV itself and refuses the flag."""
    import argparse
    from alabama.errors import UsageError
    from alabama.hil import cli
    from alabama.hil.targets import SerialTarget, SimTarget

    def argv(*a):
        p = argparse.ArgumentParser()
        cli.register(p.add_subparsers())
        return cli.pytest_argv(p.parse_args(["hil"] + list(a)))
    real = ["--board", "/dev/ttyX", "--board-type", "devkitc1-inmp441", "--bind", "10.0.0.2"]
    assert argv(*real, "--speaker-out", "hw:1,0")[-2:] == ["--hil-speaker-out", "hw:1,0"]
    assert "--hil-speaker-out" not in argv(*real)
    with pytest.raises(UsageError, match="real board"):
        argv("--board", "sim", "--speaker-out", "default")
    assert "mic_feed" in SerialTarget("/dev/ttyX", "b", speaker_out="hw:1,0").features
    assert "mic_feed" not in SerialTarget("/dev/ttyX", "b").features
    assert "mic_feed" in SimTarget.features
