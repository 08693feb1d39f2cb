# Sample conversion for the audio HAL in viper (the hot path on the board); same contract as
# _audio_pure.py, which documents fmt. No allocation, no state, no I2S. Byte-wise loads and stores
# only: the frame tail sits at any offset of the Noise buffer, and xtensa faults on unaligned
# 16/32-bit access. Every intermediate stays within 31 bits (|s| <= 2**15, gain < 2**15), so the
# code is right with viper's 32-bit int on the board and its 64-bit int on the unix port.
import micropython


@micropython.viper
def mic_to_s16(dst: ptr8, dpos: int, src: ptr8, nframes: int, fmt: int, gain: int):
    bpf = fmt & 15
    ss = 2
    if fmt & 16:
        ss = 4
    sel = (fmt >> 5) & 3
    shift = (fmt >> 8) & 15
    stereo = bpf == 2 * ss
    i = 0
    o = dpos
    f = 0
    while i < nframes:
        p = f + ss - 2
        if stereo and sel == 1:
            p += ss
        s = src[p] | (src[p + 1] << 8)
        s = (s ^ 0x8000) - 0x8000
        if stereo and sel == 2:
            q = p + ss
            r = src[q] | (src[q + 1] << 8)
            s = (s + ((r ^ 0x8000) - 0x8000)) >> 1
        s = (s * gain) >> shift
        if s > 32767:
            s = 32767
        elif s < -32768:
            s = -32768
        dst[o] = s & 0xFF
        dst[o + 1] = (s >> 8) & 0xFF
        o += 2
        f += bpf
        i += 1


@micropython.viper
def s16_to_spk(dst: ptr8, src: ptr8, spos: int, nframes: int, fmt: int, gain: int):
    bpf = fmt & 15
    ss = 2
    if fmt & 16:
        ss = 4
    shift = (fmt >> 8) & 15
    stereo = bpf == 2 * ss
    i = 0
    p = spos
    o = 0
    while i < nframes:
        s = src[p] | (src[p + 1] << 8)
        s = (s ^ 0x8000) - 0x8000
        s = (s * gain) >> shift
        if s > 32767:
            s = 32767
        elif s < -32768:
            s = -32768
        lo = s & 0xFF
        hi = (s >> 8) & 0xFF
        if ss == 4:
            dst[o] = 0
            dst[o + 1] = 0
            dst[o + 2] = lo
            dst[o + 3] = hi
            if stereo:
                dst[o + 4] = 0
                dst[o + 5] = 0
                dst[o + 6] = lo
                dst[o + 7] = hi
        else:
            dst[o] = lo
            dst[o + 1] = hi
            if stereo:
                dst[o + 2] = lo
                dst[o + 3] = hi
        o += bpf
        p += 2
        i += 1
