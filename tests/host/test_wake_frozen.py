"""Wake models frozen into the image (issue 37): on the 32-bit interpreter with the firmware AND the four shipped
models frozen in (WAKE_MODELS=... tools/mp32/build_frozen.sh -> build/mp32-frozen-wake, as `alabama image` freezes
a board file's wake.models), the loader reads each model in place (model.load_frozen: memoryviews of the frozen
bytes, nothing copied) and

- its probabilities and detections equal pymicro-wakeword's TFLite bit for bit (the C path, as on the board);
- the no-PSRAM devkit's firmware, booted as app.main boots it at its board file's heap (130k), then a session,
  loads the model through Runtime.wake_engine and steps with 0 B per 20 ms mic chunk, keeping the 12.5 % of the
  heap docs/memory.md asks for free; a model that does not fit shows device.info's wake_error (button capture),
  never a crash. The figures (free, largest free block before/after the load and in steady state) are what
  docs/wake.md's table records.

Also the host side (alabama.wake.frozen): the generated module, and the one-line refusals of a damaged model or
one of another format version. The interpreter items skip, saying how to build it, without build/mp32-frozen-wake;
they fail under CI."""
import copy
import json
import os
import pathlib
import re
import subprocess
import tempfile

import numpy as np
import pytest

from mpharness import ROOT, run_micropython

from alabama.board.fwset import FIRMWARE
from alabama.wake import frozen as Z
from alabama.wake.compile import ModelError

MP32_WAKE = ROOT / "build" / "mp32-frozen-wake" / "micropython"
MODELS = ("okay_nabu", "hey_jarvis", "alexa", "hey_mycroft")
BUILD = 'WAKE_MODELS="%s" tools/mp32/build_frozen.sh' % " ".join(MODELS)
FREE_AT_REST = 0.125          # tests/host/test_memory_fit.py: the share of the heap that stays free


@pytest.fixture(scope="module")
def mp_wake():
    why = None
    if not os.access(str(MP32_WAKE), os.X_OK):
        why = "no interpreter with wake models frozen at %s: run `%s`" % (MP32_WAKE, BUILD)
    else:
        want = subprocess.run("find . -name '*.py' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16",
                              shell=True, capture_output=True, text=True, cwd=str(FIRMWARE)).stdout.strip()
        got = (MP32_WAKE.parent / "STAMP").read_text().strip() if (MP32_WAKE.parent / "STAMP").exists() else ""
        if want != got:
            why = "%s froze other firmware than firmware/: run `%s` again" % (MP32_WAKE, BUILD)
    if why:
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return str(MP32_WAKE)


def _sizes(model):
    """(n8, n32) of the frozen model: its int8 weights and its int32 tables (load_frozen copies the tables, 4 * n32
    bytes, when they are not word-aligned in memory)."""
    ns = {}
    exec((MP32_WAKE.parent / "wake" / "alabama_wake.py").read_text(), ns)
    b = ns["MODEL_%d" % ns["NAMES"].index(model)]
    h = json.loads(b[12:12 + int.from_bytes(b[4:8], "little")])
    return h["n8"], h["n32"]


def _tables(model):
    return 4 * _sizes(model)[1]


# --- parity: the frozen model on the C path equals TFLite ---------------------------------------------------

_LOAD_FILE = 'sys.path.insert(0, %(fw)r)\nfrom satellite.wake import model as M\nassert M.IMPL == "c", M.IMPL\n' \
    'm = M.load(open(%(model)r, "rb"))\n'
_LOAD_FROZEN = """import gc
from satellite import wake
from satellite.wake import model as M
assert M.IMPL == "c", M.IMPL
gc.collect()
a = gc.mem_alloc()
buf = wake.frozen(%(model)r)
m = M.load_frozen(buf)
gc.collect()
print("LOADED", gc.mem_alloc() - a, m.copied, len(buf))
"""


def _runner():
    """test_wake_c_models' runner (features in, probabilities and detections out) over the frozen model."""
    from test_wake_c_models import _RUNNER
    assert _LOAD_FILE in _RUNNER, "test_wake_c_models._RUNNER changed: update _LOAD_FILE here"
    return _RUNNER.replace(_LOAD_FILE, _LOAD_FROZEN)


@pytest.mark.parametrize("model", MODELS)
def test_frozen_model_read_in_place_equals_tflite_on_the_32bit_frozen_build(model, mp_wake, tmp_path):
    pytest.importorskip("pymicro_wakeword", reason="pymicro-wakeword has no wheel for this platform")
    from alabama.wake import reference as R
    from test_wake_c_models import _stream
    frames = R.features_of(_stream(7, ", ".join(m.replace("_", " ") for m in [model] + list(R.BUILTIN)), tmp_path))
    rp, rh = R.run_reference(model, frames)
    (tmp_path / "f.bin").write_bytes(np.asarray(frames, dtype="<u2").tobytes())
    script = tmp_path / "run.py"
    script.write_text(_runner() % {"model": model, "feats": str(tmp_path / "f.bin"), "out": str(tmp_path / "out.bin")})
    r = run_micropython([str(script)], micropython=mp_wake, heap="1m", env={"MICROPYPATH": ".frozen"})
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    loaded, copied, size = (int(v) for v in re.search(rb"LOADED (\d+) (\d+) (\d+)", r.stdout).groups())
    # the weights read in place, never copied; the int32 tables too where the build left the constant word-aligned
    # (else only they are copied: docs/wake.md)
    assert copied in (0, _tables(model)), copied
    # the heap holds the arena and the op program, not the weights: a load that copied them would take more
    # than the weights alone
    assert loaded < _sizes(model)[0], (loaded, size)
    out = (tmp_path / "out.bin").read_bytes()
    probs, hits = list(out[0::2]), [bool(v) for v in out[1::2]]
    assert len(probs) == len(rp) > 100
    assert probs == rp                                  # every uint8 probability, bit for bit
    assert hits == [bool(h) for h in rh]
    assert len(set(probs)) >= 2


# --- the devkit's heap: boot, a session, the wake engine, steady state ---------------------------------------

_MARK = """    from satellite.provision import listen, ggwave_rx
    rx = ggwave_rx.GgwaveReceiver(ring=bufs.ring)        # as Runtime._wait_reprovision lends it
    out["listen_free"] = free() + out["fake"]
"""
_WAKE = """    def mem(tag):
        print("MEMINFO " + tag)
        micropython.mem_info()
    mem("session")
    out["wake_name"] = rt.settings["wake_word"]
    w = rt.wake_engine()                              # what device.py calls when capture_mode is wake
    out["wake_error"] = rt.wake_error
    out["info_wake"] = rt.info()["wake"]
    if w is not None:
        out["copied"] = w.model.copied
        out["loaded_free"] = free() + out["fake"]
        mem("loaded")
        chunk = bytearray(640)                        # 20 ms of mic audio: a noise-like pattern
        x = 12345
        for i in range(0, 640, 2):
            x = (x * 1103515245 + 12345) & 0x3FFFFFFF
            chunk[i] = x & 255
            chunk[i + 1] = (x >> 8) & 7
        for _ in range(150):                          # 3 s of audio: frontend window and model state filled
            w.feed(chunk, 0, 320)
        worst = 0
        for _ in range(50):                           # 1 s more, each chunk measured
            gc.collect()
            gc.disable()
            a = gc.mem_alloc()
            w.feed(chunk, 0, 320)
            d = gc.mem_alloc() - a
            gc.enable()
            worst = max(worst, d)
        out["alloc_per_chunk"] = worst
        out["steady_free"] = free() + out["fake"]
        mem("steady")
"""
_MEM = re.compile(r"MEMINFO (\w+)\n(?:.*\n)*?.*GC: total: (\d+), used: (\d+), free: (\d+).*\n.*max free sz: (\d+)")
BLOCK = 16                    # bytes per GC block on 32 bits (4 words)


def _probe():
    from test_memory_fit import PROBE
    assert _MARK in PROBE, "test_memory_fit.PROBE changed: update _MARK here"
    return PROBE.replace(_MARK, _WAKE)


def devkit_wake(model, micropython, heap=None, flash=None, before=""):
    """Boot the devkit (its board file, `model` as wake_word) on `micropython` with the firmware frozen, then a
    session and the wake engine: (probe's JSON, {tag: (free, largest free block)})."""
    from alabama.board import boards, deploy
    b = boards.with_wake(boards.load("devkitc1-inmp441"), model)
    if heap:
        d = copy.deepcopy(b.data)
        d["heap"] = heap
        b = boards.Board(d, b.path)
    with tempfile.TemporaryDirectory() as tmp:
        pathlib.Path(tmp, "board.json").write_bytes(deploy.board_json_bytes(b))
        pathlib.Path(tmp, "boot.py").write_bytes((FIRMWARE / "boot.py").read_bytes())
        for rel, data in (flash or {}).items():
            f = pathlib.Path(tmp, rel)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
        probe = _probe().replace("    w = rt.wake_engine()", before + "    w = rt.wake_engine()")
        p = subprocess.run([micropython, "-X", "heapsize=%s" % b.heap, "-c", probe], capture_output=True,
                           text=True, cwd=tmp, env=dict(os.environ, MICROPYPATH=".frozen"), timeout=300)
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("FITJSON "):
            res = json.loads(line[8:])
    assert res is not None, "the probe printed no result (exit %d): %s" % (p.returncode, (p.stderr or p.stdout)[-800:])
    mem = {m.group(1): (int(m.group(4)), int(m.group(5)) * BLOCK) for m in _MEM.finditer(p.stdout)}
    return res, mem, b


@pytest.mark.parametrize("model", MODELS)
def test_devkit_frozen_image_wakes_at_its_heap_with_0_bytes_per_chunk(model, mp_wake):
    res, mem, b = devkit_wake(model, mp_wake)
    from test_memory_fit import _heap_bytes
    heap = _heap_bytes(b.heap)
    print(model, json.dumps(res), mem)
    assert "error" not in res, res
    assert res["wake_error"] is None and res["info_wake"] == model, res
    assert res["copied"] in (0, _tables(model))         # the weights stayed in flash (the tables where aligned)
    assert res["alloc_per_chunk"] == 0                  # steady state allocates nothing
    assert res["steady_free"] >= FREE_AT_REST * heap, (res["steady_free"], heap)
    assert set(mem) == {"session", "loaded", "steady"}
    # the load costs the arena, the frontend and the op program: far less than the model file (34-54 KB)
    assert res["session_free"] - res["loaded_free"] < 30000, res


def test_devkit_model_that_does_not_fit_says_so_in_device_info_not_a_crash(mp_wake):
    # the same boot at a heap the engine cannot fit beside the firmware: device.info's wake_error, button capture
    res, mem, b = devkit_wake("okay_nabu", mp_wake, heap="100k")
    assert "error" not in res, res                      # the firmware itself booted and ran a session
    assert res["info_wake"] is None
    assert "does not fit" in res["wake_error"] or "MemoryError" in res["wake_error"], res


@pytest.mark.parametrize("damage, words", [("memoryview(good)[:-9]", "truncated"),
                                           ("b'AWW9' + good[4:12]", "another format")])
def test_damaged_frozen_model_is_reported_in_device_info_and_the_button_captures(damage, words, mp_wake):
    # the run-time side of a bad frozen model: the devkit boots, Runtime.wake_engine meets the damaged constant,
    # device.info says why (wake_error) and the board captures by button; no crash, nothing else lost. Frozen
    # constants cannot be damaged after the build, so the probe hands the detector a damaged copy of one.
    before = ("    from satellite.wake import detector as _D\n"
              "    good = _D.frozen('alexa')\n"
              "    _D.frozen = lambda name=None: %s if name else ('alexa',)\n" % damage)
    res, mem, b = devkit_wake("alexa", mp_wake, before=before)
    assert "error" not in res, res                      # booted, a session, the engine refused: no crash
    assert res["info_wake"] is None
    assert res["wake_error"].startswith("frozen model alexa: ") and words in res["wake_error"], res


# --- the host side: the generated module and its refusals ---------------------------------------------------

def _blob():
    pytest.importorskip("pymicro_wakeword", reason="pymicro-wakeword has no wheel for this platform")
    from alabama.wake.reference import compile_named
    return compile_named("hey_jarvis")


def test_generated_module_holds_the_compiled_files_as_they_are(tmp_path):
    blob = _blob()
    (tmp_path / "a.aww").write_bytes(blob)
    path = Z.write(tmp_path / "out", [str(tmp_path / "a.aww"), "hey_jarvis"][:1], say=lambda s: None)
    ns = {}
    exec(path.read_text(), ns)
    assert ns["NAMES"] == ("a",) and ns["MODEL_0"] == blob
    # the int32 tables start word-aligned in the file (the compiler pads its header): read in place on the board
    hl = int.from_bytes(blob[4:8], "little")
    assert (12 + hl) % 4 == 0


@pytest.mark.parametrize("edit, words", [
    (lambda b: b[:-7], "damaged: "),
    (lambda b: b + b"\0", "trailing bytes"),
    (lambda b: b"AWW1" + b[4:], "is format AWW1, the firmware being frozen reads AWW2"),
    (lambda b: b"RIFF" + b[4:], "is not a compiled board model file"),
    (lambda b: b[:12] + b"[" + b[13:], "its header is not the compiler's JSON"),
])
def test_image_time_refuses_a_damaged_or_other_version_model_in_one_line(edit, words, tmp_path):
    bad = tmp_path / "bad.aww"
    bad.write_bytes(edit(_blob()))
    with pytest.raises(ModelError) as e:
        Z.write(tmp_path / "out", [str(bad)], say=lambda s: None)
    msg = str(e.value)
    assert words in msg and "\n" not in msg and msg.startswith("wake model bad ")
    assert not (tmp_path / "out" / "alabama_wake.py").exists()
    # the build script's entry point: the same line, exit status 2, no traceback
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "alabama.wake.frozen", str(tmp_path / "o2"),
                        str(FIRMWARE), str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == "alabama: error: " + msg and "Traceback" not in r.stderr


def test_alabama_image_refuses_a_board_model_it_cannot_freeze_in_one_line(tmp_path, capsys):
    # `alabama image` as a maker runs it (dry run: the checks and the files, not ESP-IDF's build) on a board file
    # whose wake.models names a damaged .tflite: one line naming it, non-zero, no traceback, no manifest naming it
    from alabama.board import boards
    from alabama.cli import main
    from test_image import fake_idf, fake_source
    bad = tmp_path / "mine.tflite"
    bad.write_bytes(b"not a flatbuffer at all")
    (tmp_path / "mine.json").write_text('{"micro": {"probability_cutoff": 0.9, "sliding_window_size": 5, '
                                        '"feature_step_size": 10}}')
    d = copy.deepcopy(boards.load("devkitc1-inmp441").data)
    d["wake"] = {"models": [str(bad)]}
    (tmp_path / "devkitc1-inmp441.json").write_text(json.dumps(d))
    src = fake_source(tmp_path)
    env, _ = fake_idf(tmp_path)
    os.environ["IDF_PATH"] = env["IDF_PATH"]
    try:
        rc = main(["image", "--board", str(tmp_path / "devkitc1-inmp441.json"), "--micropy-dir", str(src), "--out",
                   str(tmp_path / "out"), "--dry-run"])
    finally:
        del os.environ["IDF_PATH"]
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "mine" in err and "damaged" in err, err
    assert not (tmp_path / "out" / "manifest.py").exists()


@pytest.mark.slow
def test_deploy_to_an_image_carrying_the_models_copies_no_model_file(tmp_path, mp_wake):
    # `alabama deploy` against a (virtual) board running the image with the models frozen in: its probe reports
    # frozen_wake, so no .aww is copied and only the engine's arena counts against the heap (at 130k a model file
    # in RAM would be refused: test_wake_board)
    from alabama.board import boards, deploy
    from test_image import _vb
    b = boards.with_wake(boards.load("sim"), "okay_nabu")
    d = copy.deepcopy(b.data)
    d["heap"] = "130k"
    b = boards.Board(d, b.path)
    flash = tmp_path / "flash"
    flash.mkdir()
    vb = _vb(flash, mp_wake)
    try:
        copied = deploy.deploy(b, vb.pty_path, build_dir=tmp_path / "b", reset=False, out=lambda s: None)
        assert "board.json" in copied and not [p for p in copied if p.startswith("wake/")], copied
        assert not (flash / "wake").exists()
    finally:
        vb.stop()
