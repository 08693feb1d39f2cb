# Audio plumbing shared by the HALs: I2S <-> s16 mono conversion (viper with a pure fallback), gain and
# volume as fixed-point factors, and the playout jitter ring. Pure computation on caller buffers: no I2S,
# no files, no clock, and nothing allocated after construction (hot-path calls take (buf, start, n)).
from micropython import const


def load_fast(fast, pure):
    """(module, True) for the viper module `fast`, else (the pure twin `pure`, False). The fast one fails on
    CPython or a port without the native emitter (ImportError, SyntaxError, NameError, NotImplementedError)
    and, on a board, with MemoryError when its native code finds no room (MicroPython v1.27.0 ports/esp32/main.c
    esp_native_code_commit: heap_caps_malloc(MALLOC_CAP_EXEC) outside the GC heap, m_malloc_fail on NULL):
    a failed import leaves nothing in sys.modules, so the pure
    module loads cleanly after a collection."""
    try:
        return __import__(fast, None, None, ("_",)), True
    except (ImportError, SyntaxError, NameError, NotImplementedError, MemoryError):
        pass
    import gc
    gc.collect()
    return __import__(pure, None, None, ("_",)), False


_m, VIPER = load_fast("satellite._audio_viper", "satellite._audio_pure")
mic_to_s16 = _m.mic_to_s16
s16_to_spk = _m.s16_to_spk
copy = load_fast("satellite.wire._copy_viper", "satellite.wire._copy")[0].copy
del _m

MIC_SHIFT = const(8)      # mic gain is q8: 256 = unity
VOL_SHIFT = const(14)     # speaker volume is q14: 16384 = unity
SEL_LEFT = const(0)
SEL_RIGHT = const(1)
SEL_AVERAGE = const(2)
MAX_GAIN_DB = const(24)
# q8 factors for 0..24 dB (round(256 * 10 ** (dB / 20))), computed once here so no float runs on the board.
_DB_Q8 = (256, 287, 322, 362, 406, 455, 511, 573, 643, 722, 810, 908, 1019, 1144, 1283, 1440, 1615,
          1812, 2033, 2282, 2560, 2872, 3223, 3616, 4057)


def fmt_code(bits, channels, select=SEL_LEFT, shift=0):
    """The fmt word of _audio_pure/_audio_viper for an I2S side of `bits` (16/32) x `channels` (1/2)."""
    if bits not in (16, 32) or channels not in (1, 2):
        raise ValueError("I2S format must be 16/32-bit, mono/stereo (got %d-bit x %d)" % (bits, channels))
    ss = bits // 8
    return (ss * channels) | (16 if bits == 32 else 0) | (select << 5) | (shift << 8)


def select_code(slot):
    """Board-file slot ("left", "right", "both") -> channel select for a stereo mic bus."""
    if slot == "right":
        return SEL_RIGHT
    if slot == "both":
        return SEL_AVERAGE
    return SEL_LEFT


def mic_gain_q8(db):
    """Mic gain in dB (0..24) -> q8 factor."""
    if db < 0:
        db = 0
    if db > MAX_GAIN_DB:
        db = MAX_GAIN_DB
    return _DB_Q8[db]


def volume_q14(volume):
    """Speaker volume 0..100 -> q14 factor, squared for a roughly perceptual taper (100 = unity)."""
    if volume <= 0:
        return 0
    if volume >= 100:
        return 16384
    return (volume * volume * 16384) // 10000


class JitterRing:
    """A byte ring of s16 audio: the render stream writes frame tails in, the player reads frames out.

    Sized from SpeakerParams.buffer_ms (the depth the core paces to) plus one frame of slack. write()
    takes what fits and reports it: the excess of a core that overruns its pacing is dropped (the
    render is LOSSY_OK) and counted in `dropped`."""

    def __init__(self, capacity, buf=None):
        self.buf = buf if buf is not None else bytearray(capacity)   # buf: preallocated (satellite.buffers)
        self.cap = capacity if capacity <= len(self.buf) else len(self.buf)
        self.rd = 0
        self.n = 0
        self.dropped = 0

    def clear(self):
        self.rd = 0
        self.n = 0

    def available(self):
        return self.n

    def free(self):
        return self.cap - self.n

    def write(self, src, start, n):
        room = self.cap - self.n
        if n > room:
            self.dropped += n - room
            n = room
        n &= ~1                                   # whole samples only
        if n <= 0:
            return 0
        w = self.rd + self.n
        if w >= self.cap:
            w -= self.cap
        k = self.cap - w
        if k > n:
            k = n
        copy(self.buf, w, src, start, k)
        if n > k:
            copy(self.buf, 0, src, start + k, n - k)
        self.n += n
        return n

    def read(self, dst, dpos, n):
        """Move up to n bytes into dst[dpos:]; return how many."""
        if n > self.n:
            n = self.n
        if n <= 0:
            return 0
        r = self.rd
        k = self.cap - r
        if k > n:
            k = n
        copy(dst, dpos, self.buf, r, k)
        if n > k:
            copy(dst, dpos + k, self.buf, 0, n - k)
        r += n
        if r >= self.cap:
            r -= self.cap
        self.rd = r
        self.n -= n
        return n
