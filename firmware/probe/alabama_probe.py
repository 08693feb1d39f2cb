# The board probe's on-board half: the figures `alabama board probe` reads from the chip (docs/probe.md).
# Copied to the board's .alabama-probe/ as .mpy by alabama.board.probe (fwset.build_probe), imported over the
# raw REPL, and unlinked from flash as soon as it is imported (alabama/board/onboard/probe_set.py): a board
# that disconnects mid-probe keeps nothing of it. It must not write to flash (the virtual board's speaker file
# aside), start the satellite runtime, or keep the microphone/speaker open after a stage. Each stage prints its result as one line MARK + JSON (and, for the
# memory snapshots, micropython.mem_info()'s own lines after a MARK "meminfo <label>" line, which the host
# parses: mem_info prints, it returns nothing). Tested on the unix port (tests/firmware/test_probe_onboard.py).
import gc
import os
import sys
import json
import time

import micropython
from micropython import const

MARK = "ALABAMA-BOARD-PROBE "
# One 20 ms audio frame each way on the wire (tools/bench/bench_crypto_aead.py FRAME_SEAL/FRAME_OPEN: 640 B of
# 16 kHz samples sent, 960 B of 24 kHz received, each + the 10-byte frame prefix and StreamChunk header).
_SEAL = const(650)
_OPEN = const(970)
_TAG = const(16)
_FRAME_US = const(20000)
_RATE = const(16000)
_NFRAMES = const(320)               # 20 ms at 16 kHz
_TONE_PERIOD = const(16)            # 1 kHz at 16 kHz: 16 samples a period, so one table serves every frame
TONE_AMP = const(8000)             # about -12 dBFS: loud enough to hear, far from clipping
_CLIP = const(32767)
_SKIP = const(5)                    # frames left out of the statistics: 100 ms of mic start-up
_MAX_SECONDS = const(10)            # the longest capture/ggwave stage the host may ask for
_HS_RX = const(256)                 # IK message 2 is 48 B + the payload (the core sends none): well within
# A heap region larger than the S3's whole internal SRAM (512 KiB) can only be PSRAM.
_INTERNAL_MAX = const(512 * 1024)


def emit(d):
    print(MARK + json.dumps(d))


def _esp32():
    try:
        import esp32
        return esp32
    except ImportError:
        return None


def idf_heap():
    """esp32.idf_heap_info(HEAP_DATA) as [total, free, largest free, min free] per region; None off the esp32."""
    e = _esp32()
    info = getattr(e, "idf_heap_info", None)    # the virtual board's simulated esp32 (partitions only) has none
    if info is None:
        return None
    return [list(r) for r in info(e.HEAP_DATA)]


def internal_free(regions):
    """Free bytes of the internal-RAM regions (a region over 512 KiB is PSRAM); None without regions."""
    if regions is None:
        return None
    return sum(r[1] for r in regions if r[0] <= _INTERNAL_MAX)


def mem(label):
    """A memory snapshot: mem_info()'s lines (parsed by the host) and one JSON line with gc.mem_free(), which
    on the esp32 port counts free + max new split (py/modgc.c), and the IDF's data-heap regions."""
    gc.collect()
    print(MARK + "meminfo " + label)
    micropython.mem_info()
    emit({"mem": label, "gc_free": gc.mem_free(), "gc_alloc": gc.mem_alloc(), "idf": idf_heap()})


def image():
    """What the board says it is: machine, MicroPython version, .mpy ABI, reset cause, flash size, PSRAM
    (the largest data-heap region when it exceeds internal SRAM), CPU clock, _aead_c, the satellite firmware
    and the id of its /board.json."""
    d = {"platform": sys.platform, "version": ".".join(str(v) for v in sys.implementation.version[:3]),
         "machine": getattr(sys.implementation, "_machine", sys.platform),
         "mpy": getattr(sys.implementation, "_mpy", 0), "maxsize": sys.maxsize}
    try:
        import machine
        d["freq_hz_at_boot"] = machine.freq()
        if sys.platform == "esp32":
            # what the satellite's HAL sets first (hal/esp32.py): the generic S3 image may boot at 160 MHz,
            # and every estimate assumes 240
            machine.freq(240000000)
        d["freq_hz"] = machine.freq()
        c = machine.reset_cause()
        d["reset_cause"] = c
        for name in ("PWRON_RESET", "HARD_RESET", "WDT_RESET", "DEEPSLEEP_RESET", "SOFT_RESET"):
            if getattr(machine, name, None) == c:
                d["reset_cause"] = name
    except (ImportError, AttributeError):
        d["reset_cause"] = None
    try:
        import esp
        d["flash_bytes"] = esp.flash_size()
    except (ImportError, AttributeError):
        d["flash_bytes"] = None
    regions = idf_heap()
    if regions is None:
        d["psram_bytes"] = None
    else:
        big = [r[0] for r in regions if r[0] > _INTERNAL_MAX]
        d["psram_bytes"] = max(big) if big else 0
    try:
        import _aead_c  # noqa: F401
        d["aead_c"] = True
    except ImportError:
        d["aead_c"] = False
    try:
        with open("board.json") as f:
            d["board_id"] = json.load(f).get("id")
    except (OSError, ValueError, AttributeError):
        d["board_id"] = None
    try:
        import satellite
        d["satellite"] = getattr(satellite, "VERSION", "?")
        d["satellite_file"] = getattr(satellite, "__file__", ".frozen")
    except ImportError:
        d["satellite"] = None
    emit({"image": d})


def wifi(ssid, passphrase, timeout_ms):
    """Join ssid (already joined: kept), then a memory snapshot 'wifi'. Never stores the credentials."""
    try:
        import network
    except ImportError:
        emit({"wifi": None, "wifi_note": "no network module (the unix port has no Wi-Fi)"})
        return
    w = network.WLAN(network.STA_IF)
    w.active(True)
    if not w.isconnected():
        if not ssid:
            emit({"wifi": None, "wifi_note": "no Wi-Fi credentials given"})
            return
        w.connect(ssid, passphrase)
        t0 = time.ticks_ms()
        while not w.isconnected():
            if time.ticks_diff(time.ticks_ms(), t0) > timeout_ms:
                emit({"wifi": None, "wifi_note": "not connected to %s after %d ms (status %s)"
                      % (ssid, timeout_ms, w.status())})
                return
            time.sleep_ms(100)
    mem("wifi")
    emit({"wifi": w.ifconfig()[0], "rssi": w.status("rssi")})


def _aead_us(impl, pairs):
    from satellite.noise.chachapoly import ChaChaPoly
    seal, opn = ChaChaPoly(impl), ChaChaPoly(impl)
    seal.set_key(bytes(range(32)))
    opn.set_key(bytes(range(32)))
    src = bytearray(_OPEN)
    for i in range(_OPEN):
        src[i] = (i * 7 + 3) & 0xFF
    sealed = bytearray(_SEAL + _TAG)
    msg = bytearray(_OPEN + _TAG)
    out = bytearray(_OPEN)
    opn.encrypt_into(1, b"", src, _OPEN, msg)
    best = 0
    for n in range(pairs):
        t0 = time.ticks_us()
        seal.encrypt_into(n, b"", src, _SEAL, sealed)
        opn.decrypt_into(1, b"", msg, _OPEN + _TAG, out)
        dt = time.ticks_diff(time.ticks_us(), t0)
        if n == 0 or dt < best:
            best = dt
    return best


def crypto(pairs):
    """ticks_us of one 20 ms frame pair (seal 650 B + open 970 B; the fastest of `pairs`) per AEAD path the
    image has ('c', 'viper'; pure only when neither), and of one X25519."""
    try:
        from satellite.noise import chachapoly, x25519
    except ImportError:
        emit({"crypto": None, "crypto_note": "no satellite firmware on the board"})
        return
    gc.collect()
    r = {}
    for impl in chachapoly.IMPLS:
        if impl != "pure" or len(chachapoly.IMPLS) == 1:
            r[impl] = _aead_us(impl, pairs)
    k = bytearray(32)
    for i in range(32):
        k[i] = (i * 29 + 1) & 0xFF
    u = bytes([9] + [0] * 31)
    t0 = time.ticks_us()
    x25519.x25519(k, u)
    xt = time.ticks_diff(time.ticks_us(), t0)
    emit({"aead_pair_us": r, "x25519_us": xt, "x25519_impl": x25519.IMPLS[0]})


def handshake(host, port, core_key_hex, timeout_ms):
    """A full Noise IK handshake (the firmware's NoiseConnection) against the core at host:port, with a fresh
    identity made for this probe only: ticks_us from connect() to the handshake done, and of the TCP connect."""
    try:
        from satellite.noise.transport import NoiseConnection
        from satellite.noise.state import public_key
    except ImportError:
        emit({"ik": None, "ik_note": "no satellite firmware on the board"})
        return
    import socket
    import binascii
    priv = os.urandom(32)
    pub = public_key(priv)
    key = binascii.unhexlify(core_key_hex)
    conn = NoiseConnection(True, priv, pattern="IK", remote_static=key, rng=os.urandom, tx_capacity=_HS_RX,
                           rx_buf=bytearray(_HS_RX), static_public=pub)
    gc.collect()
    t0 = time.ticks_us()
    s = socket.socket()
    try:
        s.settimeout(timeout_ms / 1000)
        s.connect(socket.getaddrinfo(host, port)[0][-1])
        tc = time.ticks_diff(time.ticks_us(), t0)
        out = conn.start()
        s.write(out)
        while not conn.handshake_done:
            d = s.recv(_HS_RX)          # recv, not readinto: a blocking readinto waits for the whole buffer
            if not d:
                emit({"ik": None, "ik_note": "the core closed the connection during the handshake"})
                return
            conn.receive_into(d, 0, len(d))
            out = conn.data_to_send()
            if out:
                s.write(out)
        t = time.ticks_diff(time.ticks_us(), t0)
    except OSError as e:
        emit({"ik": None, "ik_note": "cannot reach the core at %s:%d (%s)" % (host, port, e)})
        return
    finally:
        s.close()
    emit({"ik": t, "ik_connect_us": tc})


def wake(model_path, steps):
    """ticks_us of one 10 ms step of the wake word's audio frontend and of one model inference (the fastest of
    `steps` each), with the path each took ('c', 'viper', 'pure'); the model file at model_path (the host copies a
    compiled one there) is read, then removed. Figures the budget of docs/wake.md is checked against."""
    import os
    try:
        from satellite.wake import frontend, model
    except ImportError:
        if model_path:
            os.remove(model_path)
        emit({"wake": None, "wake_note": "no wake word in this firmware (satellite.wake)"})
        return
    import array
    gc.collect()
    fe = frontend.Frontend()
    src = bytearray(320)
    for i in range(160):                     # a loud 1 kHz-ish tone: every stage does its full work
        v = ((i * 37) % 200 - 100) * 160
        src[2 * i] = v & 0xFF
        src[2 * i + 1] = (v >> 8) & 0xFF
    out = array.array("H", bytes(2 * model.FEATURES))
    best = 0
    for n in range(steps + 2):
        t0 = time.ticks_us()
        fe.step(src, 0, out)
        dt = time.ticks_diff(time.ticks_us(), t0)
        if n >= 2 and (best == 0 or dt < best):    # the first two only fill the window
            best = dt
    r = {"frontend_step_us": best, "frontend_impl": frontend.IMPL}
    if model_path:
        try:
            with open(model_path, "rb") as f:
                m = model.load(f)
        finally:
            try:
                os.remove(model_path)
            except OSError:
                pass
        inf = 0
        for n in range(m.stride * steps):
            t0 = time.ticks_us()
            p = m.step(out)
            dt = time.ticks_diff(time.ticks_us(), t0)
            if p >= 0 and (inf == 0 or dt < inf):
                inf = dt
        r.update(inference_us=inf, model_impl=model.IMPL, model_stride=m.stride, model_window=m.window)
        del m
    emit({"wake": r})


def guarded(key, fn, *args):
    """Run one stage; a MemoryError (a small heap: the no-PSRAM devkit) becomes the stage's figure None and a
    note with the heap it met, so the stages after it still run and the report says what did not fit."""
    try:
        fn(*args)
    except MemoryError as e:
        gc.collect()
        free = gc.mem_free() if hasattr(gc, "mem_free") else -1       # -1: CPython (the tests)
        emit({key: None, key + "_note": "out of heap (%s): %d B free after a collect" % (e, free)})


def ggwave(seconds):
    """The ggwave receiver listening to `seconds` of low noise: ticks_us spent per second of audio."""
    if seconds < 1 or seconds > _MAX_SECONDS:
        raise ValueError("ggwave seconds must be 1..%d" % _MAX_SECONDS)
    try:
        from satellite.provision.ggwave_rx import GgwaveReceiver
    except ImportError:
        emit({"ggwave": None, "ggwave_note": "no satellite firmware on the board"})
        return
    rx = GgwaveReceiver()
    buf = bytearray(2 * _NFRAMES)
    x = 12345
    for i in range(0, len(buf), 2):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        v = ((x >> 16) & 0xFF) - 128                # about -48 dBFS of white noise
        buf[i] = v & 0xFF
        buf[i + 1] = (v >> 8) & 0xFF
    gc.collect()
    frames = seconds * (_RATE // _NFRAMES)
    t0 = time.ticks_us()
    for _ in range(frames):
        rx.feed(buf, _NFRAMES)
    emit({"ggwave_us": time.ticks_diff(time.ticks_us(), t0), "ggwave_audio_us": frames * _FRAME_US})


def frame_stats(buf, n, acc):
    """Add one frame of n s16 samples (little-endian bytes) to acc = [frames, zero frames, stuck frames,
    samples, clipped, sum, sum of squares, tone cos, tone sin]."""
    zero = True
    stuck = True
    first = buf[0] | (buf[1] << 8)
    s = sq = c = si = clip = 0
    for i in range(n):
        v = buf[2 * i] | (buf[2 * i + 1] << 8)
        if v != first:
            stuck = False
        if v >= 32768:
            v -= 65536
        if v:
            zero = False
        if v >= _CLIP or v <= -_CLIP:
            clip += 1
        s += v
        sq += v * v
        c += v * _COS[i % _TONE_PERIOD]
        si += v * _COS[(i + 12) % _TONE_PERIOD]   # sin(x) = cos(x - 90 deg): a quarter period back
    acc[0] += 1
    if zero:
        acc[1] += 1
    elif stuck:
        acc[2] += 1
    acc[3] += n
    acc[4] += clip
    acc[5] += s
    acc[6] += sq
    acc[7] += c
    acc[8] += si


# cos(2 pi k / 16) in Q10, for the 1 kHz tone (one period at 16 kHz)
_COS = (1024, 946, 724, 392, 0, -392, -724, -946, -1024, -946, -724, -392, 0, 392, 724, 946)


def summary(acc):
    """acc (frame_stats) -> the figures of one phase."""
    n = acc[3] or 1
    mean = acc[5] / n
    var = acc[6] / n
    import math
    rms = math.sqrt(var) if var > 0 else 0.0
    # amplitude of the 1 kHz component: 2/N * |sum x e^-jwt|, the table in Q10
    amp = 2 * math.sqrt(acc[7] * acc[7] + acc[8] * acc[8]) / 1024 / n
    return {"frames": acc[0], "zero_frames": acc[1], "stuck_frames": acc[2], "samples": acc[3],
            "clipped": acc[4], "dc": mean, "rms": rms, "tone_amp": amp}


def _tone():
    b = bytearray(2 * _NFRAMES)
    for i in range(_NFRAMES):
        v = TONE_AMP * _COS[i % _TONE_PERIOD] // 1024
        b[2 * i] = v & 0xFF
        b[2 * i + 1] = (v >> 8) & 0xFF
    return b


def _capture(hal, rec, tone):
    """Fill rec (s16 bytes, whole 20 ms frames) from the HAL's microphone; with tone, keep the speaker fed
    with it meanwhile. The statistics come after (stats), so the capture keeps up with the DMA ring."""
    got = 0
    view = memoryview(rec)
    frames = len(rec) // (2 * _NFRAMES)
    while got < frames:
        if tone is not None and hal.spk_wait_ms() == 0:
            hal.spk_write(tone, 0, _NFRAMES)
        w = hal.mic_wait_ms()
        if w:
            time.sleep_ms(1 if w > 1 else w)
            continue
        hal.mic_take(view, got * 2 * _NFRAMES, _NFRAMES)
        got += 1


def stats(rec, skip):
    """The figures of a recording, its first `skip` frames left out (the mic's start-up, the ring's first fill)."""
    acc = [0] * 9
    view = memoryview(rec)
    for f in range(skip, len(rec) // (2 * _NFRAMES)):
        frame_stats(view[f * 2 * _NFRAMES:], _NFRAMES, acc)
    return summary(acc)


def audio(ms):
    """The microphone through the satellite's HAL (the board file /board.json): `ms` with the room quiet, then
    `ms` with a 1 kHz tone played from the board's own speaker (full duplex only), a memory snapshot
    'capture' in between with both open, and the internal RAM each I2S ring took."""
    if ms < 200 or ms > _MAX_SECONDS * 1000:
        raise ValueError("audio ms must be 200..%d" % (_MAX_SECONDS * 1000))
    try:
        from satellite.app import load_board, make_hal
        board = load_board()
    except (ImportError, SystemExit):
        emit({"audio": None, "audio_note": "no satellite firmware (or no /board.json) on the board"})
        return
    hal = make_hal(board)
    if not getattr(hal, "mic_supported", True):
        emit({"audio": None, "audio_note": "the board's microphone is unsupported: %s" % hal.mic_error})
        return
    r = {"duplex": getattr(hal, "duplex", "full")}
    rec = bytearray(ms // 20 * 2 * _NFRAMES)
    try:
        gc.collect()
        f0 = internal_free(idf_heap())
        hal.mic_open(_RATE, _NFRAMES)
        f1 = internal_free(idf_heap())
        r["mic_dma_bytes"] = None if f0 is None else f0 - f1
        _capture(hal, rec, None)
        r["quiet"] = stats(rec, _SKIP)
        if r["duplex"] == "full":
            f2 = internal_free(idf_heap())
            hal.spk_open(_RATE, _NFRAMES)
            f3 = internal_free(idf_heap())
            r["spk_dma_bytes"] = None if f2 is None else f2 - f3
            mem("capture")
            _capture(hal, rec, _tone())
            r["tone"] = stats(rec, _SKIP)
        else:
            mem("capture")
            r["tone_note"] = "half duplex: the speaker and the mic share one I2S bus, no loopback"
        r["overruns"] = getattr(hal, "mic_overruns", None)
    finally:
        hal.mic_close()
        hal.spk_stop()
        hal.spk_close()
    emit({"audio": r})
