"""`alabama board probe`: measure a board (or the virtual board) and set each figure beside the estimate we publish.

Responsible for: driving the probe set (firmware/probe/, compiled by fwset.build_probe, run over the raw REPL
with mpremote, stage by stage), a reference core to handshake against, parsing what the board prints, the
report (PROBE_FORMAT, below), the estimates it compares with (ONE file: docs/estimates.json, checked against the
docs' own words by tests/host/test_estimates.py), the proposed board-file patch (a JSON merge patch, RFC 7386)
and cleaning up: the probe set leaves the board's flash as soon as it is loaded, and whatever an interrupted
probe left is removed in a finally here and again at the next probe's start.
Not responsible for: what the board measures and how (firmware/probe/alabama_probe.py), mpremote's plumbing
(mpremote.py), the firmware set (fwset.py), board files (boards.py). It never writes to a board outside
fwset.PROBE_REMOTE and never changes a board file: the patch is written for the user to review.

The report (PROBE_FORMAT 1), what `--json` prints and run_probe() returns; other tools (the HIL bench's fleet
report) read it, so a change here is a new format number::

    {"probe": 1, "board": "<board file id>", "port": "<port or 'sim'>", "sim": bool,
     "image": {... what the board reports: platform, version, machine, mpy, reset_cause, flash_bytes,
               psram_bytes, freq_hz, aead_c, satellite (firmware version or None) ...},
     "figures": [{"name": str, "value": number|null, "unit": str, "estimate": number|null,
                  "ratio": number|null (value / estimate), "source": "<where the estimate is published>",
                  "note": str}],
     "patch": {<JSON merge patch against boards/<board>.json: only what the measurement contradicts>},
     "patch_notes": [str]}

A figure the board could not give has value null and a note saying why (never a made-up value); on the
virtual board every note starts with "sim:" (the unix port on this computer's CPU: it proves the path and the
format, not the chip).
"""
import asyncio
import hashlib
import json
import math
import os
import pathlib
import re
import shutil
import sys
import tempfile
import threading
import time

from .. import REPO
from ..errors import AlabamaError, UsageError
from . import fwset, mpremote

PROBE_FORMAT = 1
ESTIMATES = REPO / "docs" / "estimates.json"
MARK = "ALABAMA-BOARD-PROBE "          # the on-board module's MARK (firmware/probe/alabama_probe.py)
REMOTE = fwset.PROBE_REMOTE
#: How many 20 ms frame pairs the AEAD figure takes the fastest of, seconds of audio the ggwave receiver hears,
#: ms of each microphone phase (quiet, tone): enough to average over, short enough for a devkit's heap (the
#: recording is 32 B per ms).
AEAD_PAIRS = 20
GGWAVE_SECONDS = 2
AUDIO_MS = 1000
#: Steps (frontend) and inferences timed by the wake stage; the fastest counts (as the crypto stage's pairs).
WAKE_STEPS = 20
#: The model the wake stage times: the smallest shipped one (docs/wake.md's cost table has every model).
WAKE_MODEL = "hey_jarvis"
WIFI_TIMEOUT_MS = 20000
#: Seconds the first contact may take (a soft reset and the hash of every firmware file on a slow UART) before
#: the peer is called "not a MicroPython board".
CONNECT_TIMEOUT = 60
HANDSHAKE_TIMEOUT_MS = 10000
#: Internal RAM kept back from the heap the patch proposes: Wi-Fi's dynamic RX/TX buffers come and go at run
#: time (docs/memory.md), so the heap may not take all that was reachable at the one moment measured.
IDF_RESERVE = 16 * 1024
#: A proposed heap within this share of the board file's is not worth a change.
HEAP_TOLERANCE = 0.05
#: Microphone phases: a frame counts as heard when the 1 kHz tone rises this many dB over the quiet room.
TONE_HEARD_DB = 10.0
FULL_SCALE = 32768.0
STAGES = ("image", "wifi", "crypto", "handshake", "ggwave", "audio", "wake")
#: The memory snapshots the stages take: (label, when).
SNAPSHOTS = (("boot", "after a soft reset, only the probe loaded"), ("wifi", "with Wi-Fi connected"),
             ("capture", "with the mic and the speaker open"))
#: A heap region larger than the S3's internal SRAM (512 KiB) can only be PSRAM (firmware/probe: _INTERNAL_MAX).
INTERNAL_MAX = 512 * 1024


class ProbeError(AlabamaError):
    """The probe cannot go on; the message is one line saying what was found and what to do."""


# --- estimates -------------------------------------------------------------------------------------------

def load_estimates(path=ESTIMATES):
    """The published estimates (docs/estimates.json): a list of {name, value, unit, source, quote, boards?}."""
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ProbeError("cannot read the estimates file %s (%s): restore it from the repository"
                         % (fwset.shown(path), e)) from None
    return data["estimates"]


def estimate_for(estimates, name, board_id):
    """The estimate of `name` for this board: one naming the board first, else one for every board; None."""
    general = None
    for e in estimates:
        if e["name"] != name:
            continue
        if board_id in e.get("boards", ()):
            return e
        if "boards" not in e and general is None:
            general = e
    return general


# --- what the board printed ------------------------------------------------------------------------------

_MEM_TOTAL = re.compile(r"GC: total: (\d+), used: (\d+), free: (\d+)(?:, max new split: (\d+))?")


def parse_output(text):
    """The board's output -> {key: value} of every MARK JSON line merged, plus 'meminfo': {label: {total, used,
    free, max_new_split}} from the mem_info() lines after each 'meminfo LABEL' mark."""
    out = {"meminfo": {}}
    label = None
    for line in text.replace("\r", "\n").split("\n"):
        line = line.strip()
        if line.startswith(MARK):
            body = line[len(MARK):]
            if body.startswith("meminfo "):
                label = body[len("meminfo "):].strip()
                continue
            label = None
            try:
                d = json.loads(body)
            except ValueError:
                continue
            if isinstance(d, dict):
                mem = d.pop("mem", None)
                if mem is not None:
                    out.setdefault("mem", {})[mem] = d
                else:
                    out.update(d)
            continue
        m = _MEM_TOTAL.search(line)
        if m and label is not None:
            out["meminfo"][label] = {"total": int(m.group(1)), "used": int(m.group(2)), "free": int(m.group(3)),
                                     "max_new_split": int(m.group(4)) if m.group(4) else None}
    return out


# --- figures -----------------------------------------------------------------------------------------------

def _db(amp):
    return 20 * math.log10(amp / FULL_SCALE) if amp and amp > 0 else None


def _reachable(raw, label):
    """What the heap could still take at snapshot `label`: GC free + max new split (mem_info), or None."""
    mi = raw.get("meminfo", {}).get(label)
    if not mi:
        return None
    return mi["free"] + (mi["max_new_split"] or 0)


def measured(raw, sim=False):
    """{figure name: (value or None, unit, note)} from the parsed output of every stage."""
    f = {}
    s = "sim: " if sim else ""
    mi = raw.get("meminfo", {})

    def put(name, value, unit, note=""):
        f[name] = (value, unit, (s + note) if (note or sim) else note)

    boot = mi.get("boot")
    for label, when in SNAPSHOTS:
        m = mi.get(label)
        why = "no snapshot %s" % when
        put("gc_total_%s_bytes" % label, m and m["total"], "B", "mem_info() 'GC: total' %s" % when if m else why)
        put("gc_free_%s_bytes" % label, m and m["free"], "B", "mem_info() 'free' %s" % when if m else why)
        put("gc_max_new_split_%s_bytes" % label, m and m["max_new_split"], "B",
            "mem_info() 'max new split' (what the heap may still take from the IDF) %s" % when if m and
            m["max_new_split"] is not None else (why if not m else "no 'max new split' (no split heap: not an esp32)"))
        regions = ((raw.get("mem") or {}).get(label) or {}).get("idf")
        internal = [r for r in regions or () if r[0] <= INTERNAL_MAX]
        put("idf_internal_free_%s_bytes" % label, sum(r[1] for r in internal) if regions else None, "B",
            "esp32.idf_heap_info(HEAP_DATA), regions of internal RAM, free %s" % when if regions
            else "no esp32.idf_heap_info (not an esp32)" if m else why)
        put("idf_internal_largest_%s_bytes" % label, max((r[2] for r in internal), default=0) if regions else None,
            "B", "the largest free internal block %s" % when if regions
            else "no esp32.idf_heap_info (not an esp32)" if m else why)
    put("heap_reachable_at_boot_bytes", _reachable(raw, "boot"), "B",
        "GC free + max new split at boot (gc.mem_free() on the esp32 port)" if boot else "no mem_info() at boot")
    wifi_note = raw.get("wifi_note")
    if "wifi" in mi and boot:
        put("wifi_internal_ram_bytes", _reachable(raw, "boot") - _reachable(raw, "wifi"), "B",
            "drop of GC free + max new split from boot to Wi-Fi connected (%s)" % raw.get("wifi"))
    else:
        put("wifi_internal_ram_bytes", None, "B", "Wi-Fi not measured: %s" % (wifi_note or "stage not run"))
    cap = mi.get("capture")
    put("heap_reachable_during_capture_bytes",
        (cap["total"] + (cap["max_new_split"] or 0)) if cap else None, "B",
        ("GC total + max new split with the mic and speaker open%s" % (" and Wi-Fi up" if "wifi" in mi else
                                                                    ", Wi-Fi not up")) if cap
        else "no capture: %s" % (raw.get("audio_note") or "stage not run"))
    au = raw.get("audio") or {}
    for k in ("mic_dma_bytes", "spk_dma_bytes"):
        v = au.get(k)
        if v is not None:
            why = ""
        elif not au:
            why = raw.get("audio_note") or "stage not run"
        elif k == "spk_dma_bytes" and au.get("tone_note"):
            why = au["tone_note"]
        else:
            why = "esp32.idf_heap_info unavailable (not an esp32)"
        put(k, v, "B", "drop of the internal data heap's free bytes (esp32.idf_heap_info) when the ring was made"
            if v is not None else "not measured: %s" % why)
    aead = raw.get("aead_pair_us") or {}
    for impl in ("viper", "c"):
        us = aead.get(impl)
        put("aead_frame_pair_%s_pct" % impl, us * 100.0 / 20000 if us is not None else None,
            "% of a 240 MHz core" if not sim else "% of one host core",
            "ticks_us of seal 650 B + open 970 B, fastest of %d, over 20 ms (%s us)" % (AEAD_PAIRS, us)
            if us is not None else ("this image has no %s AEAD path" % impl if raw.get("crypto", 1) is not None
                                    else raw.get("crypto_note", "stage not run")))
    xt = raw.get("x25519_us")
    put("x25519_ms", xt / 1000.0 if xt is not None else None, "ms",
        "one X25519 (%s), ticks_us" % raw.get("x25519_impl") if xt is not None
        else raw.get("crypto_note", "stage not run"))
    ik = raw.get("ik")
    put("ik_handshake_ms", ik / 1000.0 if ik is not None else None, "ms",
        "IK with the reference core, connect to done, the network included (TCP connect %.1f ms)"
        % (raw.get("ik_connect_us", 0) / 1000.0) if ik is not None else raw.get("ik_note", "stage not run"))
    gg = raw.get("ggwave_us")
    put("ggwave_listening_pct", gg * 100.0 / raw["ggwave_audio_us"] if gg is not None else None,
        "% of real time", "ggwave receiver listening to %d s of low noise" % (raw.get("ggwave_audio_us", 0) // 10 ** 6)
        if gg is not None else raw.get("ggwave_note", "stage not run"))
    for phase in ("quiet", "tone"):
        p = au.get(phase)
        why = (au.get("tone_note") if phase == "tone" else None) or raw.get("audio_note") or "stage not run"
        if p is None:
            for k, unit in (("rms_dbfs", "dBFS"), ("dc", "LSB"), ("clip_frac", "fraction"),
                            ("zero_frames_frac", "fraction"), ("stuck_frames_frac", "fraction")):
                put("mic_%s_%s" % (phase, k), None, unit, "not measured: %s" % why)
            continue
        n = max(p["frames"], 1)
        put("mic_%s_rms_dbfs" % phase, _db(p["rms"]), "dBFS", "%d frames of 20 ms%s%s" % (
            p["frames"], ", 1 kHz tone on the board's speaker" if phase == "tone" else ", room quiet",
            "" if p["rms"] else "; every sample was 0 (no level in dB)"))
        put("mic_%s_dc" % phase, p["dc"], "LSB", "mean sample")
        put("mic_%s_clip_frac" % phase, p["clipped"] / max(p["samples"], 1), "fraction", "samples at full scale")
        put("mic_%s_zero_frames_frac" % phase, p["zero_frames"] / n, "fraction", "frames of all-zero samples")
        put("mic_%s_stuck_frames_frac" % phase, p["stuck_frames"] / n, "fraction",
            "frames of one repeated non-zero sample")
    q, t = au.get("quiet"), au.get("tone")
    if q and t and t["tone_amp"]:
        gain = (_db(t["tone_amp"]) or -200) - (_db(q["tone_amp"]) or -200)
        put("loopback_tone_gain_db", gain, "dB",
            "the 1 kHz component with the tone played over the quiet room's (>= %.0f dB: speaker, amp enable and "
            "mic all work)" % TONE_HEARD_DB)
    elif q and t:
        put("loopback_tone_gain_db", None, "dB", "no gain: the mic heard no 1 kHz component at all while the tone "
            "played (a silent or stuck mic, or no speaker output: see the mic figures above)")
    else:
        put("loopback_tone_gain_db", None, "dB", "not measured: %s"
            % ((au.get("tone_note") if au else None) or raw.get("audio_note") or "stage not run"))
    put("mic_overruns", au.get("overruns"), "count", "mic DMA ring overruns the HAL counted during the probe"
        if au.get("overruns") is not None else "not measured")
    wk = raw.get("wake") or {}
    why = raw.get("wake_note") or ("stage not run" if "wake" not in raw else "")
    core = "% of one host core" if sim else "% of a 240 MHz core"
    step = wk.get("frontend_step_us")
    put("wake_frontend_pct", step / 100.0 if step else None, "%",
        ("one 10 ms step of the wake word's audio frontend (%s path), as %s" % (wk.get("frontend_impl"), core))
        if step else "not measured: %s" % why)
    inf = wk.get("inference_us")
    put("wake_inference_ms", inf / 1000.0 if inf else None, "ms",
        ("one %s inference (%s path), every %d feature frames" % (WAKE_MODEL, wk.get("model_impl"),
                                                                  wk.get("model_stride") or 0))
        if inf else "not measured: %s" % (why or "no model was timed (pymicro-wakeword absent on the host)"))
    share = step / 100.0 + inf / 100.0 / wk["model_stride"] if step and inf and wk.get("model_stride") else None
    put("wake_pct", share, "%", "frontend + %s: the steady share of the wake word (%s)" % (WAKE_MODEL, core)
        if share is not None else "not measured: %s" % (why or "needs both the step and the inference"))
    return f


def figures(raw, board_id, estimates, sim=False):
    """The report's figures: each measured figure beside its published estimate and the ratio."""
    rows = []
    for name, (value, unit, note) in measured(raw, sim).items():
        est = estimate_for(estimates, name if name != "heap_reachable_during_capture_bytes" else "gc_heap_bytes",
                           board_id)
        ev = est["value"] if est and isinstance(est["value"], (int, float)) else None
        if name == "loopback_tone_gain_db":
            amp = estimate_for(estimates, "amp_enable", board_id)
            if amp:
                note += "; amp enable (estimate: %s, %s)" % (amp["value"], amp["source"])
                est = amp
        ratio = value / ev if (value is not None and ev) else None
        rows.append({"name": name, "value": value, "unit": unit, "estimate": ev,
                     "ratio": round(ratio, 4) if ratio is not None else None,
                     "source": est["source"] if est else "", "note": note})
    return rows


# --- the board-file patch ------------------------------------------------------------------------------------

def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: `patch` applied to a copy of `target`."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def propose_patch(raw, board, sim=False):
    """(merge patch against the board file, notes): only what the measurement contradicts. Never on the
    virtual board's heap (-X heapsize is not a chip's RAM)."""
    from . import deploy
    patch, notes = {}, []
    data = board.data
    img = raw.get("image") or {}
    au = raw.get("audio") or {}
    cap = raw.get("meminfo", {}).get("capture")
    if sim:
        notes.append("sim: no heap proposed (the unix port's heap is its -X heapsize, not a chip's free RAM)")
    elif cap is not None and data.get("psram") == "none":
        reach = cap["total"] + (cap["max_new_split"] or 0)
        want = (reach - IDF_RESERVE) // 1024
        have = deploy.heap_bytes(data["heap"]) // 1024
        if abs(want - have) > HEAP_TOLERANCE * have:
            patch["heap"] = "%dk" % want
            notes.append("heap %s -> %dk: %d B reachable with the mic and speaker open%s, less %d B for the IDF"
                         % (data["heap"], want, reach, " and Wi-Fi up" if "wifi" in raw.get("meminfo", {}) else
                            " (Wi-Fi NOT up: probe again with Wi-Fi before trusting this)", IDF_RESERVE))
    if not sim and img.get("flash_bytes"):
        mb = img["flash_bytes"] // (1024 * 1024)
        if mb != data.get("flash_mb"):
            patch["flash_mb"] = mb
            notes.append("flash_mb %s -> %d: esp.flash_size() says %d B" % (data.get("flash_mb"), mb,
                                                                            img["flash_bytes"]))
    if not sim and img.get("psram_bytes") is not None:
        has = img["psram_bytes"] > 0
        if has and data.get("psram") == "none":
            notes.append("the image reports %d B of PSRAM but the board file says none: use a SPIRAM image and "
                         "its psram type (octal or quad, from the module's marking)" % img["psram_bytes"])
        elif not has and data.get("psram") not in (None, "none"):
            notes.append("the board file says psram %s but the image reports no PSRAM heap region: a module "
                         "without PSRAM (copy the devkit's file: psram none, the generic image, heap 130k) or "
                         "an image without SPIRAM support (`alabama flash`)" % data.get("psram"))
    if au.get("overruns"):
        mic = (data.get("audio") or {}).get("mic") or {}
        ms = mic.get("dma_ms", 200)
        patch.setdefault("audio", {}).setdefault("mic", {})["dma_ms"] = ms + 40
        notes.append("audio.mic.dma_ms %d -> %d: the mic ring overran %d times during the probe"
                     % (ms, ms + 40, au["overruns"]))
    q = au.get("quiet")
    if q and q["frames"] and q["zero_frames"] == q["frames"]:
        notes.append("%severy mic frame was all zeros: check the mic's wiring and audio.mic.slot (an INMP441 with "
                     "L/R to GND is the left slot)" % ("sim: " if sim else ""))
    g = None
    for row in figures(raw, board.id, [], sim):
        if row["name"] == "loopback_tone_gain_db":
            g = row["value"]
    if g is not None and g < TONE_HEARD_DB and q and q["zero_frames"] < q["frames"]:
        notes.append("%sthe tone played on the speaker was not heard (%.1f dB over the quiet room): check "
                     "amp_enable (%s) and the speaker wiring; no pin is proposed, none was proved"
                     % ("sim: the simulated mic does not hear its speaker; " if sim else "", g,
                        json.dumps(data.get("amp_enable"))))
    return patch, notes


# --- the reference core --------------------------------------------------------------------------------------

class _Core:
    """A reference core on its own event-loop thread (as the HIL bench runs one), for the IK handshake."""

    def __init__(self, data_dir, host):
        from alabama.core.server import CoreServer
        self.host = host
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="probe-core", daemon=True)
        self.thread.start()
        self.server = CoreServer(data_dir, host=host, port=0, control=False, save_reports=False)
        try:
            self._call(self.server.start())
        except OSError as e:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise ProbeError("cannot start the reference core on %s (%s): pass --bind with an address of this "
                             "computer" % (host, e)) from None

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    @property
    def address(self):
        return self.server.port, self.server.public_key

    def close(self):
        try:
            self._call(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


# --- driving the board ----------------------------------------------------------------------------------------

#: The key under which each stage reports its figure (and `<key>_note` why it has none).
_STAGE_KEY = {"wifi": "wifi", "crypto": "crypto", "handshake": "ik", "ggwave": "ggwave", "audio": "audio",
              "wake": "wake"}


def _call(code, stage=None):
    """The board-side call of a stage, run through alabama_probe.guarded: a stage that runs out of heap (the
    no-PSRAM devkit's 130k) reports that as its note instead of ending the probe."""
    if stage is None:
        return "import alabama_probe as _P\n%s\n" % code
    fn, _, args = code.partition("(")
    return "import alabama_probe as _P\n_P.guarded(%r, %s, %s\n" % (_STAGE_KEY[stage], fn, args)


class _Board:
    def __init__(self, port, runner, restart):
        self.port, self.runner, self.stage, self.restart = port, runner, "connect", restart

    def run(self, stage, args):
        self.stage = stage
        try:
            return self.runner(self.port, args)
        except mpremote.MpremoteError as e:
            if e.board_raised:            # the board's traceback came back (not mpremote's own, host-side one)
                raise ProbeError("the probe's %s stage failed on the board on %s (%s): please report it with this "
                                 "line and `alabama board probe --json --port %s` of the stages before it"
                                 % (stage, self.port, e, self.port)) from None
            why = e
            if "://" not in self.port and not self.port.upper().startswith("COM") and not os.path.exists(self.port):
                why = "its port %s no longer exists" % self.port     # gone at the stage's start: not "busy"
            raise ProbeError("the board on %s stopped answering during the probe's %s stage (%s): check the USB "
                             "cable and power, press RESET, and run the probe again" % (self.port, stage, why)) \
                from None


#: sys.platform of MicroPython's unix port (the virtual board), whichever way it is reached.
UNIX_PORT_PLATFORMS = ("linux", "darwin", "freebsd")
#: s of no raw-REPL banner after Ctrl-C Ctrl-A from a peer that prints something else: not MicroPython.
IDENTIFY_SECONDS = 3
#: s between the Ctrl-C Ctrl-A sequences sent while no raw-REPL banner came
RESEND_S = 0.5
#: IDENTIFY_SECONDS for a virtual board (MicroPython for sure): the venv's 64-bit unix port dies now and then of a
#: Ctrl-C that lands while its heap is locked ("MemoryError: ... heap is locked", "FATAL: uncaught NLR"); its
#: supervisor reboots it in about a second, and a later Ctrl-C gets the raw REPL
SIM_IDENTIFY_SECONDS = 20
#: s a virtual board may take to print its firmware's first line (it is interrupted for the probe after that)
BOOT_TIMEOUT = 60


def _connect(port, runner, timeout, identify_s=None):
    """mpremote.probe (a soft reset into a clean interpreter) with a non-MicroPython peer said plainly: a peer that
    answers Ctrl-C Ctrl-A with anything but MicroPython's raw-REPL banner within IDENTIFY_SECONDS is named at
    once; a silent one gets `timeout` s (mpremote waits forever for a raw REPL that never opens)."""
    identify_s = identify_s or IDENTIFY_SECONDS
    if runner is mpremote.run_mpremote:
        try:            # held by another program: said as such, not as a peer that is no MicroPython
            mpremote.check_free(port)
        except mpremote.NotAPortError:
            raise
        except mpremote.MpremoteError as e:
            raise ProbeError(str(e)) from None
    said = _identify(port, identify_s) if runner is mpremote.run_mpremote else None
    if said:
        raise _not_micropython(port, "no MicroPython raw REPL within %d s; it prints %r" % (identify_s, said[:60]))
    if runner is mpremote.run_mpremote:
        def runner(p, args, on_line=None):
            return mpremote.run_mpremote(p, args, on_line=on_line, timeout=timeout)
    try:
        return mpremote.probe(port, runner)
    except mpremote.MpremoteError as e:
        mpremote.check_port(port, probe=True)   # /dev/null, a pipe: no device at all, so no firmware to reflash
        said = _peek(port) if runner is not None else ""
        found = ("no MicroPython raw REPL within %d s; it prints %r" % (timeout, said[:60]) if said
                 else str(e).rstrip("."))
        raise _not_micropython(port, found) from None


def _not_micropython(port, found):
    return ProbeError("the device on %s does not answer as a MicroPython board (%s): if it runs other firmware, "
                      "flash MicroPython and the satellite with `alabama flash --board NAME --port %s`"
                      % (port, found, port))


def _identify(port, seconds=IDENTIFY_SECONDS):
    """What a peer that is not MicroPython prints when asked for a raw REPL (its last line), or None: it is
    MicroPython (the banner came; it is sent back to the friendly REPL), silent, or the port cannot be opened
    here (mpremote then says why)."""
    try:
        import serial
        ser = serial.Serial(port, 115200, timeout=0.1, exclusive=True)      # never into another program's session
    except Exception:  # noqa: BLE001 - anything pyserial raises: leave the diagnosis to mpremote
        return None
    got = b""
    try:
        end = time.monotonic() + seconds
        again = 0.0
        while time.monotonic() < end:
            if time.monotonic() >= again:     # interrupt whatever runs, then ask for the raw REPL; again every
                ser.write(b"\r\x03\x03\x01")   # RESEND_S: a Ctrl-C that lands while the firmware starts is lost
                again = time.monotonic() + RESEND_S
            got += ser.read(256)
            if b"raw REPL; CTRL-B to exit" in got:
                ser.write(b"\x02")               # back to the friendly REPL: mpremote opens its own session
                return None
    except Exception:  # noqa: BLE001
        return None
    finally:
        mpremote.close_serial(ser)
    text = mpremote.last_line(got.decode("utf-8", "replace"))
    return text or None


def _peek(port, seconds=1.5):
    """The last line a serial peer prints within `seconds` after a newline ('' when silent or unopenable)."""
    try:
        import serial
        ser = serial.Serial(port, 115200, timeout=0.1, exclusive=True)
    except Exception:  # noqa: BLE001 - anything pyserial raises means there is nothing to read
        return ""
    try:
        ser.write(b"\r\n")
        got, end = b"", time.monotonic() + seconds
        while time.monotonic() < end:
            got += ser.read(256)
    except Exception:  # noqa: BLE001
        return ""
    finally:
        mpremote.close_serial(ser)
    return mpremote.last_line(got.decode("utf-8", "replace"))


def _check_mpy(info, port):
    major, sub, _ = fwset.decode_mpy(info.get("mpy") or 0)
    tool = fwset.mpy_cross_version()
    if (major, sub) != tool:
        raise ProbeError("the board on %s loads .mpy v%d.%d but mpy-cross emits v%d.%d: reflash it with "
                         "`alabama flash` or install the matching mpy-cross" % ((port, major, sub) + tuple(tool)))


def _stage_args(stage, opts):
    if stage == "wifi":
        return _call("_P.wifi(%r, %r, %d)" % (opts["ssid"], opts["passphrase"], WIFI_TIMEOUT_MS), "wifi")
    if stage == "crypto":
        return _call("_P.crypto(%d)" % AEAD_PAIRS, "crypto")
    if stage == "handshake":
        return _call("_P.handshake(%r, %d, %r, %d)" % (opts["core_host"], opts["core_port"], opts["core_key"],
                                                        HANDSHAKE_TIMEOUT_MS), "handshake")
    if stage == "ggwave":
        return _call("_P.ggwave(%d)" % GGWAVE_SECONDS, "ggwave")
    if stage == "audio":
        return _call("_P.audio(%d)" % opts.get("audio_ms", AUDIO_MS), "audio")
    if stage == "wake":
        return _call("_P.wake(%r, %d)" % (opts.get("wake_model_remote"), WAKE_STEPS), "wake")
    raise ValueError(stage)


def wake_model(build_dir=None):
    """The compiled WAKE_MODEL for the wake stage (cached under the build dir), or (None, why) without
    pymicro-wakeword on this computer: the stage then times the frontend only. The cache is named by a digest of
    the compiler's source and re-made when its file is not in the compiler's format (MAGIC): a cache left by an
    older compiler (AWW1 after AWW2 came) would otherwise be refused by the firmware."""
    from .. import BUILD
    from ..wake import compile as wake_compile
    from ..wake.reference import ModelError, compile_named
    key = hashlib.sha256(pathlib.Path(wake_compile.__file__).read_bytes()).hexdigest()[:12]
    out = pathlib.Path(build_dir or BUILD) / "_probe" / ("%s-%s.aww" % (WAKE_MODEL, key))
    if not out.is_file() or out.read_bytes()[:4] != wake_compile.MAGIC:
        try:
            blob = compile_named(WAKE_MODEL)
        except ModelError as e:
            return None, str(e)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(blob)
        tmp.replace(out)
    return out, None


def probe_board(port, runner=mpremote.run_mpremote, core=None, wifi=("", ""), stages=STAGES,
                build_dir=None, out=print, sim=False, on_stage=None, connect_timeout=None):
    """Run the probe set on the board at `port` and return the parsed raw output (parse_output of every stage).

    core: a callable returning a started reference core (.host as the board reaches it, .address = (port,
    public key), .close()) for the IK handshake stage, or None (the stage then says why it was skipped). on_stage(stage) runs before each stage (tests kill a
    virtual board there). Always removes the probe set from the board before returning or raising, and (a real
    board) soft-resets it so the satellite firmware runs again.
    """
    b = _Board(port, runner, restart=not sim and runner is mpremote.run_mpremote)
    info = _connect(port, runner, connect_timeout or CONNECT_TIMEOUT, SIM_IDENTIFY_SECONDS if sim else None)
    _check_mpy(info, port)
    files = fwset.build_probe(build_dir=build_dir)
    load = ["resume", "exec", mpremote.script("probe_set", REMOTE, "prepare", MARK)]
    for dest, src in sorted(files.items()):
        load += ["+", "fs", "cp", str(src), ":" + dest]
    load += ["+", "exec", mpremote.script("probe_set", REMOTE, "load", MARK) + _call("_P.image()\n_P.mem('boot')")]
    raw = {"meminfo": {}, "notes": []}
    loaded = False
    try:
        if on_stage:
            on_stage("image")
        text = b.run("image", load)
        got = parse_output(text)
        if "image" not in got:
            raise ProbeError("the board on %s did not load the probe set (last line %r): is the filesystem full or "
                             "read-only? `mpremote connect %s df`" % (port, mpremote.last_line(text)[:80], port))
        loaded = True
        _merge(raw, got)
        opts = {"ssid": wifi[0], "passphrase": wifi[1], "audio_ms": AUDIO_MS}
        for stage in stages:
            if stage == "image":
                continue
            if stage == "handshake" and core is None:
                raw["ik_note"] = ("no core to handshake with: pass --bind ADDR, this computer's address on the "
                                  "board's network")
                continue
            if on_stage:
                on_stage(stage)
            out("probe: %s" % stage)
            if stage == "handshake":
                _merge(raw, _handshake(b, core, opts))
            elif stage == "wake":
                model, why = wake_model(build_dir)
                args = ["resume"]
                opts["wake_model_remote"] = None
                if model is not None:          # beside the loaded set's directory (removed at load): made again
                    opts["wake_model_remote"] = REMOTE + "/wake.aww"
                    args += ["fs", "mkdir", ":" + REMOTE, "+", "fs", "cp", str(model), ":" + REMOTE + "/wake.aww",
                             "+"]
                else:
                    raw["wake_note"] = "no model timed: %s" % why
                _merge(raw, parse_output(b.run(stage, args + ["exec", _stage_args(stage, opts)])))
            else:
                _merge(raw, parse_output(b.run(stage, ["resume", "exec", _stage_args(stage, opts)])))
    except ProbeError as e:
        _cleanup(b, raw, loaded)
        if raw["cleanup"] == "ok" or loaded:
            raise
        raise ProbeError("%s (the probe set may remain in /%s/, outside the firmware's import path: the next "
                         "probe removes it)" % (e, REMOTE)) from None
    _cleanup(b, raw, loaded)
    return raw


def _board_for(board, raw):
    """(boards.Board or None, notes): the one named, else the one the board's /board.json names."""
    from . import boards
    if board is not None:
        return (boards.load(board) if isinstance(board, str) else board), []
    bid = (raw.get("image") or {}).get("board_id")
    if not bid:
        return None, ["the board holds no /board.json and no --board was given: figures are compared with the "
                      "estimates for every board only, and no board-file patch is proposed"]
    try:
        return boards.load(bid), []
    except boards.BoardError:
        return None, ["the board's /board.json names %r, which is not a board file here: pass --board NAME" % bid]


def _handshake(b, core, opts):
    """The IK stage with a reference core that lives only for it (a core left running would log the missing
    Hello while later stages run)."""
    try:
        c = core()
    except ProbeError as e:
        return {"meminfo": {}, "ik": None, "ik_note": str(e)}
    try:
        port, key = c.address
        opts.update(core_host=c.host, core_port=port, core_key=key.hex())
        return parse_output(b.run("handshake", ["resume", "exec", _stage_args("handshake", opts)]))
    finally:
        c.close()


def _merge(raw, got):
    mi = got.pop("meminfo", {})
    raw["meminfo"].update(mi)
    raw.update(got)


def _cleanup(b, raw, loaded):
    """Remove the probe set from the board (already unlinked once loaded; this catches a load cut short)."""
    try:
        b.runner(b.port, ["resume", "exec", mpremote.script("probe_set", REMOTE, "clean", MARK)])
        raw["cleanup"] = "ok"
        if b.restart:
            # the probe stopped main.py (mpremote's soft reset into the raw REPL): start the firmware again
            mpremote.soft_reset(b.port, out=lambda *a: None)
    except mpremote.MpremoteError:
        raw["cleanup"] = ("the probe set had left flash when it loaded" if loaded else
                          "could not reach the board to remove %s/ (outside the firmware's import path; the next "
                          "probe removes it)" % REMOTE)


def run_probe(target, board=None, bind=None, wifi=None, runner=mpremote.run_mpremote, out=print, stages=STAGES,
              build_dir=None, workdir=None, on_stage=None, estimates=None, connect_timeout=None):
    """Probe one board and return the report (PROBE_FORMAT 1, see the module docstring).

    target: a serial port ('/dev/ttyACM0'; None: the one Espressif USB device), 'sim' (a virtual board started
    here in `workdir` or a temporary directory, stopped at the end), or a running virtual board (an object with
    ``pty_path``, e.g. alabama.board.sim.VirtualBoard; left running).
    board: the board file's id or a boards.Board (default: the one the board's own /board.json names; a
    virtual board started here: 'sim'). bind: the address of this computer on the board's network, where the
    reference core for the IK handshake listens (default 127.0.0.1 on the virtual board; a real board without
    it skips the handshake, saying so). wifi: (ssid, passphrase) for the Wi-Fi stage (default
    $ALABAMA_WIFI_SSID / $ALABAMA_WIFI_PASSPHRASE; a board already connected keeps its network).
    stages: a subset of STAGES ('image' always runs). on_stage(stage): called before each stage.
    connect_timeout: seconds the first contact may take (CONNECT_TIMEOUT).
    Raises ProbeError (one line: what was found, what to do) for a port that is not a MicroPython board, a
    board that stops answering, or a probe set that does not load; the probe set is removed either way.
    Real boards get a soft reset at the end, so the satellite firmware runs again.
    """
    import os
    if estimates is None:
        estimates = load_estimates()
    own_vb = own_dir = None
    sim = False
    if target == "sim" or hasattr(target, "pty_path"):
        from . import sim as simmod
        sim = True
        if target == "sim":
            own_dir = None if workdir else tempfile.mkdtemp(prefix="alabama-probe-sim-")
            tmp = pathlib.Path(workdir or own_dir)
            own_vb = simmod.VirtualBoard(tmp / "flash", board=board if board is not None else "sim", run_main=False)
            board = own_vb.board
            own_vb.start()
            vb = own_vb
        else:
            vb = target
        port = vb.pty_path
        if port is None:
            raise ProbeError("this virtual board has no REPL terminal (started with pty=False): start it with "
                             "pty=True, or probe 'sim'")
        bind = bind or "127.0.0.1"
    else:
        port = mpremote.resolve_port(target)
    if wifi is None:
        wifi = (os.environ.get("ALABAMA_WIFI_SSID", ""), os.environ.get("ALABAMA_WIFI_PASSPHRASE", ""))
    core_dir = tempfile.mkdtemp(prefix="alabama-probe-core-") if bind else None
    try:
        if sim:       # its interpreter up first: a Ctrl-C sent while it still starts is lost, and a unix port
            try:      # with a raw REPL of its own (the venv's, a wheel's) never answered (the 32-bit shim did)
                banner = r"^MicroPython \S+ on "           # the REPL's: own_vb runs no main.py
                vb.wait_log(banner if own_vb is not None else r"^sat: |" + banner, BOOT_TIMEOUT)
            except simmod.SimError as e:
                raise ProbeError("the virtual board did not start: %s" % str(e).splitlines()[0]) from None
        raw = probe_board(port, runner=runner, wifi=wifi, stages=stages, build_dir=build_dir, out=out, sim=sim,
                          on_stage=on_stage, connect_timeout=connect_timeout,
                          core=(lambda: _Core(core_dir, bind)) if bind else None)
    finally:
        if core_dir:
            shutil.rmtree(core_dir, ignore_errors=True)
        if own_vb is not None:
            own_vb.stop()
        if own_dir:
            shutil.rmtree(own_dir, ignore_errors=True)
    if not sim and (raw.get("image") or {}).get("platform") in UNIX_PORT_PLATFORMS:
        sim = True                    # a virtual board reached through its REPL terminal (--port /dev/pts/N)
    bd, notes = _board_for(board, raw)
    bid = bd.id if bd is not None else None
    if sim:
        unread = [k for k in ("reset_cause", "flash_bytes", "psram_bytes") if (raw.get("image") or {}).get(k) is None]
        if unread:
            notes.append("sim: the image's %s %s null: the unix port has no machine.reset_cause, esp.flash_size or "
                         "esp32.idf_heap_info (a chip reports them)" % (", ".join(unread),
                                                                       "is" if len(unread) == 1 else "are"))
    patch, more = propose_patch(raw, bd, sim) if bd is not None else ({}, [])
    notes += more
    if raw.get("cleanup") not in (None, "ok"):
        notes.append(raw["cleanup"])
    return {"probe": PROBE_FORMAT, "board": bid, "port": "sim" if sim else port, "sim": sim,
            "image": raw.get("image") or {}, "figures": figures(raw, bid, estimates, sim),
            "patch": patch, "patch_notes": notes}


# --- output -------------------------------------------------------------------------------------------------

def _num(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.4g" % v
    return str(v)


def render_text(report):
    """The report for a terminal: the image, one line per figure (value, estimate, ratio, note), the patch."""
    img = report["image"]
    lines = ["board %s on %s%s" % (report["board"], report["port"], " (virtual board: figures of this computer, "
                                   "not a chip)" if report["sim"] else ""),
             "image: MicroPython %s on %s, .mpy %s, reset %s, flash %s B, PSRAM %s B, %s Hz (%s at boot), "
             "_aead_c %s, satellite %s" % (img.get("version"), img.get("machine"), img.get("mpy"),
                                           img.get("reset_cause"), _num(img.get("flash_bytes")),
                                           _num(img.get("psram_bytes")), _num(img.get("freq_hz")),
                                           _num(img.get("freq_hz_at_boot")), img.get("aead_c"), img.get("satellite")),
             "%-36s %12s %12s %7s  %s" % ("figure", "measured", "estimate", "ratio", "unit; note (estimate's source)")]
    for f in report["figures"]:
        lines.append("%-36s %12s %12s %7s  %s; %s%s" % (f["name"], _num(f["value"]), _num(f["estimate"]),
                                                       _num(f["ratio"]), f["unit"], f["note"],
                                                       " (%s)" % f["source"] if f["source"] else ""))
    if report["patch"]:
        lines.append("proposed board-file patch (JSON merge patch against boards/%s.json): %s"
                     % (report["board"], json.dumps(report["patch"], sort_keys=True)))
    else:
        lines.append("no board-file change proposed")
    lines += ["  " + n for n in report["patch_notes"]]
    return "\n".join(lines)


def write_patch(report, path, board=None):
    """Write the report's merge patch to `path` (JSON), after checking the patched board file still validates."""
    from . import boards
    if board is None and not report["board"]:
        raise ProbeError("the report names no board file: probe again with --board NAME to get a patch")
    bd = board or boards.load(report["board"])
    patched = merge_patch(bd.data, report["patch"])
    problems = boards.check(patched, "boards/%s.json + probe patch" % bd.id)
    if problems:
        raise ProbeError("the proposed patch would make an invalid board file (%s): report it with the --json "
                         "output attached" % problems[0])
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(path).write_text(json.dumps(report["patch"], indent=2, sort_keys=True) + "\n")
    return patched


# --- command line -------------------------------------------------------------------------------------------

def register(bsub):
    p = bsub.add_parser("probe", help="measure a board: heap, Wi-Fi RAM, crypto, handshake, ggwave, mic; "
                                      "beside our estimates",
                        description="Load a small probe set onto the board (removed again at once), measure what "
                                    "docs/probe.md lists, print each figure beside the estimate we publish "
                                    "(docs/estimates.json) and propose a board-file patch. --port sim probes the "
                                    "virtual board.")
    p.add_argument("--port", metavar="PORT", help="serial port, or 'sim' (default: the one Espressif USB device)")
    p.add_argument("--board", metavar="NAME", help="board id (boards/NAME.json); default: the one the board's "
                                                   "/board.json names (sim with --port sim)")
    p.add_argument("--bind", metavar="ADDR", help="this computer's address on the board's network: a reference "
                                                  "core listens there for the IK handshake")
    p.add_argument("--json", action="store_true", help="print the report as JSON (attach it to an issue)")
    p.add_argument("--patch-out", metavar="FILE", help="write the proposed board-file merge patch to FILE")
    p.set_defaults(func=cmd_probe)


def cmd_probe(args):
    if args.port is None and args.board == "sim":
        raise UsageError("the virtual board is probed with --port sim: alabama board probe --port sim")
    # what can be checked without the board, before it is opened and probed for a dozen seconds
    if args.board:
        from . import boards
        boards.load(args.board, option="--board")                     # a typo'd board id names the nearest
    if args.patch_out:
        from ..outfile import problem
        why = problem(args.patch_out)               # never a folder made where a typo pointed
        if why:
            raise UsageError("cannot write %s: %s: give --patch-out a file in a folder you can write"
                             % (args.patch_out, why))
    err = (lambda s: None) if args.json else print
    report = run_probe(args.port if args.port else None, board=args.board, bind=args.bind, out=err)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print(render_text(report))
    if args.patch_out and report["board"] is None:
        print("no patch written: the board names no board file; probe again with --board NAME", file=sys.stderr)
    elif args.patch_out:
        write_patch(report, args.patch_out)
        if not args.json:
            print("wrote %s (review it, then apply it to boards/%s.json)" % (args.patch_out, report["board"]))
    return 0
