# Sample conversion for the audio HAL, pure Python (works everywhere; the reference for _audio_viper).
# It converts and scales PCM between caller buffers at caller offsets; it never allocates a buffer,
# never touches I2S and holds no state. Same contract as _audio_viper.py (tests compare the two).
#
# fmt packs the I2S side's layout: bits 0-3 = bytes per I2S frame (2: s16 mono, 4: s16 stereo or
# s32 mono, 8: s32 stereo), bit 4 = 32-bit samples, bits 5-6 = channel select on stereo input
# (0 left, 1 right, 2 average), bits 8-11 = the gain's fixed-point shift (gain is gain_q / 2**shift).


def mic_to_s16(dst, dpos, src, nframes, fmt, gain):
    """I2S mic frames src[0:nframes*bpf] -> s16 LE mono at dst[dpos:dpos+2*nframes], times gain."""
    bpf = fmt & 15
    ss = 4 if fmt & 16 else 2      # bytes per sample
    sel = (fmt >> 5) & 3
    shift = (fmt >> 8) & 15
    stereo = bpf == 2 * ss
    i = 0
    o = dpos
    f = 0
    while i < nframes:
        p = f + ss - 2                 # the top 16 bits of the (left) sample
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


def s16_to_spk(dst, src, spos, nframes, fmt, gain):
    """s16 LE mono src[spos:spos+2*nframes] times gain -> I2S speaker frames dst[0:nframes*bpf]
    (mono duplicated to both channels on a stereo bus; 32-bit slots get the sample in their top half)."""
    bpf = fmt & 15
    ss = 4 if fmt & 16 else 2
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
