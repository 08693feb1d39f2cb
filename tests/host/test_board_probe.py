"""`alabama board probe` (alabama.board.probe): the report format, the figures beside the estimates, the
board-file patch, the whole probe on the virtual board (the only board here), and bad input: a peer that is
not MicroPython, a board killed mid-probe, a probe set an interrupted probe left on flash."""
import hashlib
import json
import math
import os
import pathlib
import struct
import subprocess
import sys
import threading
import tty

import pytest

from alabama.board import boards, fwset, probe
from alabama.board.sim import VirtualBoard

from mpharness import micropython_cmd

ESTIMATES = probe.load_estimates()
MARK = probe.MARK


# --- parsing what the board prints ----------------------------------------------------------------------

@pytest.mark.needs_micropython
def test_mem_info_of_the_real_unix_port_is_parsed():
    code = ("import micropython, gc\nprint(%r)\nmicropython.mem_info()\nprint(%r + '{\"mem\": \"boot\", "
            "\"gc_free\": %%d}' %% gc.mem_free())\n" % (MARK + "meminfo boot", MARK))
    out = subprocess.run([micropython_cmd(), "-X", "heapsize=200k", "-c", code], capture_output=True,
                         text=True, timeout=30).stdout
    raw = probe.parse_output(out)
    mi = raw["meminfo"]["boot"]
    assert 190 * 1024 < mi["total"] <= 200 * 1024 + 256
    assert mi["used"] + mi["free"] <= mi["total"] and mi["max_new_split"] is None     # unix: no split heap
    assert raw["mem"]["boot"]["gc_free"] > 0


def test_the_esp32_ports_max_new_split_is_parsed_and_counted_as_reachable():
    # py/gc.c gc_dump_info prints ", max new split: N" with MICROPY_GC_SPLIT_HEAP_AUTO (the esp32 port);
    # the figures are dpgeorge's on an S3 (micropython/micropython#12237)
    text = "\r\n".join([MARK + "meminfo boot", "stack: 736 out of 15360",
                        "GC: total: 64000, used: 1856, free: 62144, max new split: 8257536",
                        " No. of 1-blocks: 22, 2-blocks: 8, max blk sz: 18, max free sz: 3870",
                        MARK + json.dumps({"image": {"platform": "esp32"}}), "junk " + MARK + "{"])
    raw = probe.parse_output(text)
    assert raw["meminfo"]["boot"] == {"total": 64000, "used": 1856, "free": 62144, "max_new_split": 8257536}
    assert probe._reachable(raw, "boot") == 62144 + 8257536
    assert raw["image"] == {"platform": "esp32"}
    # a mem_info line outside a meminfo mark is not taken for one
    assert probe.parse_output("GC: total: 1, used: 1, free: 0")["meminfo"] == {}


# --- figures and estimates ----------------------------------------------------------------------------------

def _devkit_raw(split=20000, overruns=0, wifi=True, flash=8 * 1024 * 1024, tone_amp=4000.0):
    mi = {"boot": {"total": 64000, "used": 4000, "free": 60000, "max_new_split": 190000},
          "capture": {"total": 129984, "used": 90000, "free": 39984, "max_new_split": split}}
    if wifi:
        mi["wifi"] = {"total": 64000, "used": 5000, "free": 59000, "max_new_split": 147000}
    phase = {"frames": 45, "zero_frames": 0, "stuck_frames": 0, "samples": 14400, "clipped": 0, "dc": -12.5,
             "rms": 30.0, "tone_amp": 1.0}
    # esp32.idf_heap_info(HEAP_DATA): [total, free, largest free, min free] per region
    mem = {"boot": {"idf": [[300000, 200000, 110000, 190000], [30000, 20000, 20000, 20000]]}}
    return {"meminfo": mi, "mem": mem, "image": {"flash_bytes": flash, "psram_bytes": 0, "aead_c": True},
            "wifi": "192.168.1.7", "aead_pair_us": {"viper": 1500, "c": 460}, "x25519_us": 41000,
            "x25519_impl": "viper", "ik": 260000, "ik_connect_us": 9000, "ggwave_us": 260000,
            "ggwave_audio_us": 2000000,
            "audio": {"duplex": "full", "mic_dma_bytes": 26624, "spk_dma_bytes": 2048, "overruns": overruns,
                      "quiet": phase, "tone": dict(phase, rms=2900.0, tone_amp=tone_amp)}}


def _by_name(rows):
    return {r["name"]: r for r in rows}


def test_each_figure_stands_beside_its_published_estimate_with_the_ratio():
    rows = _by_name(probe.figures(_devkit_raw(), "devkitc1-inmp441", ESTIMATES))
    r = rows["aead_frame_pair_c_pct"]
    assert r["value"] == pytest.approx(460 * 100 / 20000) and r["estimate"] == 2.25
    assert r["ratio"] == pytest.approx(2.3 / 2.25, abs=1e-4) and r["source"] == "docs/benchmarks.md"
    assert rows["x25519_ms"]["ratio"] == pytest.approx(41.0 / 38.1, abs=1e-4)
    assert rows["ik_handshake_ms"]["value"] == 260.0 and rows["ik_handshake_ms"]["estimate"] == 230
    assert rows["ggwave_listening_pct"]["value"] == pytest.approx(13.0)
    assert rows["wifi_internal_ram_bytes"]["value"] == (60000 + 190000) - (59000 + 147000)
    assert rows["wifi_internal_ram_bytes"]["estimate"] == 40000
    assert rows["heap_reachable_during_capture_bytes"]["estimate"] == 129984        # the devkit's own
    assert rows["mic_dma_bytes"]["ratio"] == 1.0 and rows["spk_dma_bytes"]["ratio"] == 1.0
    assert rows["loopback_tone_gain_db"]["value"] == pytest.approx(20 * math.log10(4000.0))
    assert rows["mic_quiet_dc"]["value"] == -12.5 and rows["mic_quiet_dc"]["estimate"] is None
    assert rows["idf_internal_free_boot_bytes"]["value"] == 220000
    assert rows["idf_internal_largest_boot_bytes"]["value"] == 110000
    assert rows["idf_internal_free_wifi_bytes"]["value"] is None            # that stage printed no regions
    assert rows["gc_max_new_split_capture_bytes"]["value"] == 20000 and rows["gc_total_wifi_bytes"]["value"] == 64000
    for r in rows.values():
        assert set(r) == {"name", "value", "unit", "estimate", "ratio", "source", "note"}
        assert not r["note"].startswith("sim:")


def test_an_octal_board_gets_its_own_heap_estimate_and_the_amp_pin_in_the_loopback_note():
    rows = _by_name(probe.figures(_devkit_raw(), "atoms3r-echobase", ESTIMATES))
    assert rows["heap_reachable_during_capture_bytes"]["estimate"] == 8319360
    assert "PI4IOE5V6408 0x43 OUT=0x6F" in rows["loopback_tone_gain_db"]["note"]
    assert rows["mic_dma_bytes"]["estimate"] is None          # published for the INMP441 boards only


def test_a_figure_not_taken_is_null_with_the_reason_never_a_value():
    raw = {"meminfo": {}, "wifi_note": "no Wi-Fi credentials given", "crypto_note": "no satellite firmware",
           "crypto": None, "audio_note": "no satellite firmware (or no /board.json) on the board"}
    rows = _by_name(probe.figures(raw, "devkitc1-inmp441", ESTIMATES))
    for name in ("wifi_internal_ram_bytes", "aead_frame_pair_viper_pct", "x25519_ms", "mic_quiet_rms_dbfs",
                 "loopback_tone_gain_db", "heap_reachable_during_capture_bytes"):
        assert rows[name]["value"] is None and rows[name]["ratio"] is None and rows[name]["note"], name
    assert "no Wi-Fi credentials" in rows["wifi_internal_ram_bytes"]["note"]
    assert "no satellite firmware" in rows["x25519_ms"]["note"]


# --- the patch ------------------------------------------------------------------------------------------------

def test_merge_patch_follows_rfc7386():
    # RFC 7386 appendix A, a selection
    assert probe.merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert probe.merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert probe.merge_patch({"a": "b", "b": "c"}, {"a": None}) == {"b": "c"}
    assert probe.merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert probe.merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert probe.merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}
    assert probe.merge_patch({"a": "foo"}, "bar") == "bar"


def test_the_patch_proposes_only_what_the_measurement_contradicts():
    dk = boards.load("devkitc1-inmp441")
    patch, notes = probe.propose_patch(_devkit_raw(split=20000), dk)
    assert patch == {}                                   # (129984 + 20000 - 16 KiB) // 1024 = 130: as filed
    patch, notes = probe.propose_patch(_devkit_raw(split=60000, overruns=3, flash=16 * 1024 * 1024), dk)
    assert patch == {"heap": "%dk" % ((129984 + 60000 - probe.IDF_RESERVE) // 1024), "flash_mb": 16,
                     "audio": {"mic": {"dma_ms": 240}}}
    assert any("overran 3 times" in n for n in notes) and any("Wi-Fi up" in n for n in notes)
    patch, notes = probe.propose_patch(_devkit_raw(split=60000, wifi=False), dk)
    assert "heap" in patch and any("Wi-Fi NOT up" in n for n in notes)
    # the tone not heard: said, and no pin proposed (none was proved)
    patch, notes = probe.propose_patch(_devkit_raw(tone_amp=2.0), boards.load("esp32-s3-box-3"))
    assert "amp_enable" not in patch and any("not heard" in n and '"pin": 46' in n for n in notes)


def test_the_patch_file_is_checked_against_the_board_schema(tmp_path):
    dk = boards.load("devkitc1-inmp441")
    report = {"board": dk.id, "patch": {"heap": "169k", "flash_mb": 16}}
    patched = probe.write_patch(report, tmp_path / "p.json", dk)
    assert json.loads((tmp_path / "p.json").read_text()) == report["patch"]
    assert patched["heap"] == "169k" and patched["flash_mb"] == 16 and patched["audio"] == dk.data["audio"]
    with pytest.raises(probe.ProbeError, match="invalid board file"):
        probe.write_patch({"board": dk.id, "patch": {"audio": {"mic": {"sck": "five"}}}}, tmp_path / "q.json", dk)


# --- on the virtual board ----------------------------------------------------------------------------------

def _tone_wav(path, seconds=3, amp=3000):
    n = 16000 * seconds
    pcm = b"".join(struct.pack("<h", int(amp * math.sin(2 * math.pi * 440 * i / 16000)) + (i * 7919 % 61) - 30)
                   for i in range(n))
    from alabama import audio
    audio.write(str(path), pcm, 16000)
    return path


def _tree(flash):
    """The satellite firmware as deployed (main.py, boot.py, board.json, lib/) and whatever the probe might
    leave (.alabama-probe/), hashed; data/ (keys the firmware makes at its first boot) and the sim's speaker
    WAV are left out."""
    return {p.relative_to(flash).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(flash.rglob("*")) if p.is_file()
            and p.relative_to(flash).parts[0] in ("main.py", "boot.py", "board.json", "lib", fwset.PROBE_REMOTE)}


def _check_format(report):
    assert set(report) == {"probe", "board", "port", "sim", "image", "figures", "patch", "patch_notes"}
    assert report["probe"] == probe.PROBE_FORMAT == 1
    assert isinstance(report["image"], dict) and isinstance(report["patch"], dict)
    for f in report["figures"]:
        assert isinstance(f["name"], str) and isinstance(f["unit"], str) and isinstance(f["note"], str)
        for k in ("value", "estimate", "ratio"):
            assert f[k] is None or isinstance(f[k], (int, float)), f
        assert isinstance(f["source"], str)
    json.loads(json.dumps(report))


@pytest.fixture(scope="module")
def whole_probe(tmp_path_factory):
    """ONE whole probe of the virtual board, as a maker runs it: `alabama board probe --port sim --json --patch-out
    FILE` (in this process), its board's mic hearing a WAV and its flash holding a stale probe set an interrupted
    probe left. Returns what both tests below check: the JSON it printed, the stage lines run_probe said, the
    firmware's files before and after, the patch file."""
    import contextlib
    import io
    from alabama import cli
    from alabama.board import sim as simmod
    tmp = tmp_path_factory.mktemp("whole-probe")
    mic = _tone_wav(tmp / "mic.wav")
    got = {"seen": []}

    class ToneBoard(VirtualBoard):        # the board `--port sim` makes, with the WAV and the stale set
        def __init__(self, flash, **kw):
            stale = pathlib.Path(flash) / fwset.PROBE_REMOTE
            stale.mkdir(parents=True)
            (stale / "stale.mpy").write_bytes(b"left by an interrupted probe")
            super().__init__(flash, mic=mic, **kw)

        def start(self):
            super().start()
            got["before"] = {k: v for k, v in _tree(self.flash).items() if not k.startswith(fwset.PROBE_REMOTE)}

        def stop(self):
            got.setdefault("after", _tree(self.flash))
            super().stop()

    run_probe = probe.run_probe

    def recorded(*a, out=print, **k):     # --json says no stage line: record what it would have said
        return run_probe(*a, out=lambda s: (got["seen"].append(s), out(s)), **k)
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setattr(simmod, "VirtualBoard", ToneBoard)
        mp.setattr(probe, "run_probe", recorded)
        status = cli.main(["board", "probe", "--port", "sim", "--json", "--patch-out", str(tmp / "patch.json")])
    assert status == 0, out.getvalue()[-2000:]
    got["report"] = json.loads(out.getvalue())
    got["patch"] = json.loads((tmp / "patch.json").read_text())
    got["stdout"] = out.getvalue()
    return got


@pytest.mark.needs_micropython
def test_the_whole_probe_on_the_virtual_board(whole_probe):
    """Every stage through the raw REPL: a real IK handshake with a reference core, the firmware's AEAD,
    X25519 and ggwave receiver, the mic hearing a WAV; every note says sim; nothing left on flash; the
    firmware's files untouched."""
    report, seen, before, after = (whole_probe[k] for k in ("report", "seen", "before", "after"))
    _check_format(report)
    assert report["sim"] is True and report["port"] == "sim" and report["board"] == "sim"
    assert seen == ["probe: %s" % s for s in probe.STAGES[1:]]
    assert report["image"]["satellite"] == fwset.firmware_version()
    rows = _by_name(report["figures"])
    assert all(r["note"].startswith("sim:") for r in rows.values())
    assert rows["ik_handshake_ms"]["value"] > 0 and rows["ik_handshake_ms"]["estimate"] == 230
    assert rows["x25519_ms"]["value"] > 0 and rows["aead_frame_pair_viper_pct"]["value"] > 0
    assert rows["ggwave_listening_pct"]["value"] > 0
    assert rows["wifi_internal_ram_bytes"]["value"] is None and "no Wi-Fi" in rows["wifi_internal_ram_bytes"]["note"]
    # the WAV's 440 Hz sine of amplitude 3000: rms 2121, 20*log10(2121/32768) = -23.8 dBFS
    assert -24.5 < rows["mic_quiet_rms_dbfs"]["value"] < -23.0
    assert abs(rows["mic_quiet_dc"]["value"]) < 5
    assert rows["mic_quiet_zero_frames_frac"]["value"] == 0 and rows["mic_quiet_clip_frac"]["value"] == 0
    assert rows["loopback_tone_gain_db"]["value"] < probe.TONE_HEARD_DB          # the sim mic hears no speaker
    assert any("does not hear its speaker" in n for n in report["patch_notes"])
    assert report["patch"] == {}
    assert after == before            # the stale set removed, nothing of the probe left, the firmware intact


@pytest.mark.needs_micropython
def test_a_board_killed_mid_probe_is_one_line_and_leaves_nothing(tmp_path):
    flash = tmp_path / "flash"
    vb = VirtualBoard(flash)
    vb.start()
    try:
        before = _tree(flash)

        def kill(stage):
            if stage == "ggwave":
                vb.stop()                 # the serial port goes away, as when the USB cable is pulled
        with pytest.raises(probe.ProbeError) as e:
            probe.run_probe(vb, stages=("image", "crypto", "ggwave", "audio"), on_stage=kill, out=lambda s: None)
    finally:
        vb.stop()
    msg = str(e.value)
    assert "\n" not in msg and "stopped answering during the probe's ggwave stage" in msg
    assert "run the probe again" in msg
    assert not (flash / fwset.PROBE_REMOTE).exists()     # it left flash when it loaded
    assert {k: v for k, v in _tree(flash).items()} == before


@pytest.mark.needs_micropython
def test_a_peer_that_is_not_micropython_is_named_in_one_line():
    master, slave = os.openpty()
    tty.setraw(slave)
    port = os.ttyname(slave)
    stop = threading.Event()

    def peer():                       # an Arduino sketch: answers every byte with its banner, never a REPL
        while not stop.is_set():
            try:
                if os.read(master, 1024):
                    os.write(master, b"ESP-ROM:esp32s3-20210327\r\nHello from Arduino\r\n")
            except OSError:
                return
    threading.Thread(target=peer, daemon=True).start()
    try:
        with pytest.raises(probe.ProbeError) as e:
            probe.run_probe(port, board="devkitc1-inmp441", stages=("image",), connect_timeout=6,
                            out=lambda s: None)
    finally:
        stop.set()
        os.close(master)
        os.close(slave)
    msg = str(e.value)
    assert "\n" not in msg
    assert "does not answer as a MicroPython board" in msg and "Hello from Arduino" in msg
    assert "alabama flash --board NAME --port %s" % port in msg


@pytest.mark.needs_micropython
def test_cli_json_and_patch_out_on_the_virtual_board(whole_probe, tmp_path):
    report = whole_probe["report"]
    _check_format(report)
    from alabama.hil import report as hil_report             # the HIL report's header reads this very output
    (tmp_path / "probe.json").write_text(whole_probe["stdout"])
    assert hil_report.read_probe(tmp_path / "probe.json") == report
    assert "virtual board" in hil_report.probe_html(report)
    assert "virtual board" in probe.render_text(report) and "no board-file change proposed" in \
        probe.render_text(report)
    assert report["sim"] and report["board"] == "sim"
    assert whole_probe["patch"] == report["patch"]


@pytest.mark.needs_micropython
def test_probe_set_script_prepares_loads_and_unlinks_on_the_unix_port(tmp_path):
    """onboard/probe_set.py as the board runs it (cwd = the stand-in flash): 'prepare' removes a stale set and
    nothing else, 'load' imports the compiled module and leaves no file of it, 'clean' is idempotent."""
    from alabama.board import mpremote
    flash = tmp_path
    (flash / fwset.PROBE_REMOTE).mkdir()
    (flash / fwset.PROBE_REMOTE / "old.mpy").write_bytes(b"x")
    (flash / "main.py").write_text("print(1)\n")

    def run(mode, extra=""):
        env = {k: v for k, v in os.environ.items() if k != "MICROPYPATH"}
        r = subprocess.run([micropython_cmd(), "-c", mpremote.script("probe_set", fwset.PROBE_REMOTE, mode, MARK)
                            + extra], cwd=str(flash), capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        return probe.parse_output(r.stdout)

    assert run("prepare") == {"meminfo": {}, "mode": "prepare", "removed": 1}
    assert sorted(p.name for p in flash.iterdir()) == [fwset.PROBE_REMOTE, "main.py"]
    for dest, src in fwset.build_probe(build_dir=tmp_path / "build").items():
        (flash / dest).write_bytes(src.read_bytes())
    got = run("load", "import alabama_probe\nprint(alabama_probe.MARK + '{\"loaded\": 1}')\n")
    assert got["removed"] == 1 and got["loaded"] == 1
    assert not (flash / fwset.PROBE_REMOTE).exists() and (flash / "main.py").exists()
    assert run("clean")["removed"] == 0


@pytest.mark.needs_micropython
def test_micropython_without_the_satellite_says_so_for_every_figure_it_needs(tmp_path):
    """A MicroPython board with other code on it: the stages that need the firmware say so, figures stay null."""
    from alabama.board import fwset as fw
    built = fw.build_probe(build_dir=tmp_path / "build")
    lib = tmp_path / "lib"
    lib.mkdir()
    for src in built.values():
        (lib / src.name).write_bytes(src.read_bytes())
    code = ("import alabama_probe as P\nP.image()\nP.mem('boot')\nP.crypto(2)\nP.handshake('127.0.0.1', 1, '00'*32, "
            "1000)\nP.ggwave(1)\nP.audio(200)\n")
    env = dict(os.environ, MICROPYPATH=str(lib))           # the probe set, and no satellite package
    r = subprocess.run([micropython_cmd(), "-c", code], cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    raw = probe.parse_output(r.stdout)
    assert raw["image"]["satellite"] is None and raw["image"]["board_id"] is None
    rows = _by_name(probe.figures(raw, None, ESTIMATES))
    assert rows["gc_total_boot_bytes"]["value"] > 0                 # MicroPython itself still answers
    for name in ("aead_frame_pair_viper_pct", "x25519_ms", "ik_handshake_ms", "ggwave_listening_pct",
                 "mic_quiet_rms_dbfs"):
        assert rows[name]["value"] is None and "no satellite firmware" in rows[name]["note"], rows[name]
    assert probe._board_for(None, raw)[0] is None


def test_a_half_duplex_board_says_why_there_is_no_speaker_ring_or_loopback():
    raw = _devkit_raw()
    raw["audio"] = {"duplex": "half", "mic_dma_bytes": 30720, "overruns": 0, "quiet": raw["audio"]["quiet"],
                    "tone_note": "half duplex: the speaker and the mic share one I2S bus, no loopback"}
    rows = _by_name(probe.figures(raw, "esp32-s3-box-3", ESTIMATES))
    assert rows["mic_dma_bytes"]["value"] == 30720
    for name in ("spk_dma_bytes", "loopback_tone_gain_db", "mic_tone_rms_dbfs"):
        assert rows[name]["value"] is None and "half duplex" in rows[name]["note"], rows[name]


class _FakeBoard:
    """A runner standing in for mpremote: answers the deploy probe, the load and the stages from scripted text,
    raises MpremoteError where told, and records every command."""

    def __init__(self, fail_at=None, error="", cleanup_fails=False, board_raised=False):
        from alabama.board import mpremote
        self.mp, self.calls, self.fail_at, self.error, self.cleanup_fails = mpremote, [], fail_at, error, cleanup_fails
        self.board_raised = board_raised

    def __call__(self, port, args, on_line=None):
        code = args[-1]
        self.calls.append(code)
        run = "run(%r, " % fwset.PROBE_REMOTE
        kind = ("connect" if args[0] == "exec" else "clean" if run + "'clean'" in code else
                "image" if run + "'load'" in code else code.split("_P.")[-1].split("(")[0].split(",")[0])
        if kind == "clean" and self.cleanup_fails:
            raise self.mp.MpremoteError("serial port %s is gone" % port)
        if kind == self.fail_at:
            raise self.mp.MpremoteError(self.error, board_raised=self.board_raised)
        if kind == "connect":
            return self.mp.PROBE_MARK + json.dumps({"mpy": fwset.mpy_value("xtensawin"), "files": {}})
        if kind == "image":
            return MARK + json.dumps({"image": {"platform": "esp32", "board_id": "devkitc1-inmp441"}})
        return MARK + json.dumps({"x25519_us": 40000, "aead_pair_us": {"viper": 1500}})


def test_an_exception_on_the_board_is_not_called_a_disconnect():
    # (a MemoryError is the stage's note, alabama_probe.guarded: test_probe_onboard; any other error ends it)
    fb = _FakeBoard(fail_at="crypto", error="mpremote failed on /dev/x (exit 1): OSError: [Errno 5] EIO",
                    board_raised=True)
    with pytest.raises(probe.ProbeError) as e:
        probe.probe_board("/dev/x", runner=fb, stages=("image", "crypto", "ggwave"), out=lambda s: None)
    msg = str(e.value)
    assert "crypto stage failed on the board" in msg and "OSError" in msg and "\n" not in msg
    assert "'clean'" in fb.calls[-1]                       # removed even so
    assert not any("_P.ggwave" in c for c in fb.calls)     # and nothing more run


def test_a_load_cut_short_says_where_its_files_may_remain():
    fb = _FakeBoard(fail_at="image", error="mpremote failed on /dev/x (exit 1): could not open port",
                    cleanup_fails=True)
    with pytest.raises(probe.ProbeError) as e:
        probe.probe_board("/dev/x", runner=fb, out=lambda s: None)
    msg = str(e.value)
    assert "stopped answering during the probe's image stage" in msg
    assert "may remain in /%s/" % fwset.PROBE_REMOTE in msg and "the next probe removes it" in msg


def test_the_fake_board_report_names_the_board_from_its_board_json():
    fb = _FakeBoard()
    raw = probe.probe_board("/dev/x", runner=fb, stages=("image", "crypto"), out=lambda s: None)
    assert raw["cleanup"] == "ok" and raw["x25519_us"] == 40000
    assert probe._board_for(None, raw)[0].id == "devkitc1-inmp441"


#: What mpremote printed when the virtual board under it was stopped mid-exec (as a USB cable pulled): its own
#: host-side traceback ending in OSError [Errno 5], which looks like a board's exception on its last line.
HOST_LOST = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/serial/serialposix.py", line 595, in read
    raise SerialException(
serial.serialutil.SerialException: device reports readiness to read but returned no data (device disconnected or multiple access on port?)

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/mpremote/transport_serial.py", line 125, in close
    self.serial.rts = False
  File "/venv/lib/python3.11/site-packages/serial/serialposix.py", line 708, in _update_rts_state
    fcntl.ioctl(self.fd, TIOCMBIC, TIOCM_RTS_str)
OSError: [Errno 5] Input/output error"""
#: A board's own exception as mpremote relays it.
BOARD_RAISED = """Traceback (most recent call last):
  File "<stdin>", line 2, in <module>
  File "alabama_probe.py", line 212, in crypto
OSError: [Errno 5] EIO"""


def test_mpremotes_own_errno5_is_a_lost_board_not_the_boards_exception(tmp_path):
    """mpremote's host-side OSError [Errno 5] (the port went away under it) is not an exception the board raised:
    the probe says check the cable, press RESET, run again, not 'please report it'; a port that vanished is not
    called busy."""
    from alabama.board import mpremote
    assert not mpremote.board_raised(HOST_LOST) and mpremote.board_raised(BOARD_RAISED)
    master, slave = os.openpty()      # a terminal that exists while mpremote runs
    port = os.ttyname(slave)
    line = mpremote.explain(port, 1, HOST_LOST)
    assert "went away" in line and "press RESET" in line and "\n" not in line, line
    os.close(master)
    os.close(slave)                   # a kill at a stage's start: the port is gone when mpremote opens it
    port = str(tmp_path / "ttyACM9")  # (a pty's number may be reused at once: a path that never comes back)
    busy = "serial port %s is busy: close the program holding it" % port
    fb = _FakeBoard(fail_at="crypto", error=busy)
    with pytest.raises(probe.ProbeError) as e:
        probe.probe_board(port, runner=fb, stages=("image", "crypto"), out=lambda s: None)
    assert "busy" not in str(e.value) and "no longer exists" in str(e.value), e.value
    fb = _FakeBoard(fail_at="crypto", error=mpremote.explain("/dev/x", 1, HOST_LOST),
                    board_raised=mpremote.board_raised(HOST_LOST))
    with pytest.raises(probe.ProbeError) as e:
        probe.probe_board("/dev/x", runner=fb, stages=("image", "crypto"), out=lambda s: None)
    msg = str(e.value)
    assert "stopped answering during the probe's crypto stage" in msg and "please report" not in msg, msg


def test_loopback_gain_without_a_tone_component_gives_a_reason():
    """A mic that heard no 1 kHz component at all: the gain is null with why, not the figure's description."""
    raw = _devkit_raw(tone_amp=0.0)
    row = _by_name(probe.figures(raw, "devkitc1-inmp441", ESTIMATES))["loopback_tone_gain_db"]
    assert row["value"] is None and row["note"].startswith("no gain: the mic heard no 1 kHz"), row


@pytest.mark.needs_micropython
def test_a_running_virtual_board_probed_through_its_pty_is_the_virtual_board(tmp_path):
    """`alabama board probe --port /dev/pts/N` on a running virtual board: the report says sim, proposes no heap
    for the sim board file, and says why the image's reset cause, flash and PSRAM are null."""
    vb = VirtualBoard(tmp_path / "flash")
    vb.start()
    try:
        report = probe.run_probe(vb.pty_path, stages=("image",), out=lambda s: None)
    finally:
        vb.stop()
    assert report["sim"] is True and report["board"] == "sim", report
    assert "heap" not in report["patch"], report["patch"]
    assert any(n.startswith("sim: the image's reset_cause") for n in report["patch_notes"]), report["patch_notes"]


def test_a_chatty_peer_that_is_not_micropython_is_named_without_the_long_wait():
    """A peer that answers with something other than MicroPython's raw-REPL banner is named after
    IDENTIFY_SECONDS of asking, not after CONNECT_TIMEOUT (60 s) of mpremote waiting."""
    master, slave = os.openpty()
    tty.setraw(slave)
    port = os.ttyname(slave)
    stop = threading.Event()

    def peer():                       # a shell on a serial console: echoes a prompt at every byte
        while not stop.is_set():
            try:
                if os.read(master, 1024):
                    os.write(master, b"\r\nroot@router:~# ")
            except OSError:
                return
    threading.Thread(target=peer, daemon=True).start()
    try:
        with pytest.raises(probe.ProbeError) as e:
            probe.run_probe(port, board="devkitc1-inmp441", stages=("image",), out=lambda s: None)
    finally:
        stop.set()
        os.close(master)
        os.close(slave)
    msg = str(e.value)
    assert "does not answer as a MicroPython board" in msg and "root@router" in msg, msg
    assert "within %d s" % probe.IDENTIFY_SECONDS in msg and probe.IDENTIFY_SECONDS < probe.CONNECT_TIMEOUT


@pytest.mark.needs_micropython
def test_the_wake_stage_times_a_frontend_step_and_an_inference_and_leaves_no_model_behind(tmp_path):
    """Issue 37: the probe times one 10 ms frontend step and one inference of a compiled model (copied for the stage,
    removed after it) and prints them beside docs/wake.md's estimates; nothing of it stays on the board's flash."""
    pytest.importorskip("pymicro_wakeword")
    vb = VirtualBoard(tmp_path / "flash")
    vb.start()
    try:
        before = _tree(tmp_path / "flash")
        report = probe.run_probe(vb, stages=("image", "wake"), out=lambda s: None)
        after = _tree(tmp_path / "flash")
    finally:
        vb.stop()
    rows = _by_name(report["figures"])
    step, inf, share = rows["wake_frontend_pct"], rows["wake_inference_ms"], rows["wake_pct"]
    assert step["value"] > 0 and step["estimate"] == 4.5 and "path" in step["note"], step
    assert inf["value"] > 0 and "hey_jarvis inference" in inf["note"], inf
    assert share["value"] > step["value"] and share["estimate"] == 7.4, share
    assert after == before                     # the model file went with the stage, the probe set with the probe


def test_without_the_wake_stage_its_figures_say_why():
    rows = _by_name(probe.figures({"meminfo": {}, "wake_note": "no model timed: pymicro-wakeword is not installed"},
                                  None, ESTIMATES))
    assert rows["wake_inference_ms"]["value"] is None and "pymicro-wakeword" in rows["wake_inference_ms"]["note"]
    assert rows["wake_pct"]["value"] is None


def test_the_wake_stage_recompiles_a_cached_model_of_another_format(tmp_path):
    # a model compiled by an older compiler (AWW1 after AWW2 came) left in the build dir's cache was sent to the
    # board, which refused it: the probe failed with "wake model file in another format" on any tree that had run
    # the probe before the format changed. The cache is named by the compiler's digest and checked for its MAGIC.
    pytest.importorskip("pymicro_wakeword")
    from alabama.wake.compile import MAGIC
    first, why = probe.wake_model(tmp_path)
    assert why is None and first.read_bytes()[:4] == MAGIC
    good = first.read_bytes()
    first.write_bytes(b"AWW1" + good[4:])                   # what an older compiler left there
    again, why = probe.wake_model(tmp_path)
    assert why is None and again.read_bytes() == good
    assert first.name != probe.WAKE_MODEL + ".aww"          # an unkeyed old-style cache is never read


@pytest.mark.needs_micropython
def test_probing_sim_on_a_unix_port_with_its_own_raw_repl_waits_for_the_firmware(tmp_path, monkeypatch):
    """`alabama board probe --port sim` from a wheel runs the venv's 64-bit port, whose raw REPL is its own (the
    32-bit build's is a shim that needs no interrupt): the Ctrl-C sent at once, while the interpreter still
    started, was lost, and one that lands while the running firmware's heap is locked kills that port; either way
    the probe said the board was no MicroPython. Its own board now boots to the REPL (no main.py) and is asked
    once its banner is there."""
    port64 = pathlib.Path(sys.executable).parent / "micropython"
    if not port64.is_file():
        pytest.skip("no micropython beside this interpreter (the venv's 64-bit unix port)")
    monkeypatch.setenv("ALABAMA_MICROPYTHON", str(port64))
    report = probe.run_probe("sim", stages=("image",), workdir=tmp_path, out=lambda s: None)
    assert report["sim"] is True and report["image"]["satellite"] == fwset.firmware_version()
    assert report["image"]["platform"] == "linux", report["image"]
