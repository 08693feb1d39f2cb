# Poly1305 (RFC 8439 §2.5) with Python integers; runs everywhere (allocates on every block).
# The pure path of chachapoly.py (the viper path does Poly1305 inside _chacha_viper.run). The caller
# validates lengths.
# acc is a list [h, r, s, scratch16].

_P = (1 << 130) - 5
_CLAMP = 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF


def new_acc():
    return [0, 0, 0, bytearray(16)]


def init(acc, key):
    """Start a MAC with the 32-byte one-time key r||s at key[0:32] (r is clamped here)."""
    acc[0] = 0
    acc[1] = int.from_bytes(bytes(key[0:16]), "little") & _CLAMP
    acc[2] = int.from_bytes(bytes(key[16:32]), "little")


def update(acc, buf, start, n, hibit):
    """Absorb buf[start:start+n] as 16-byte blocks, a short last block zero-padded (the AEAD's
    pad16). hibit 1 adds 2**128 to every block; 0 is for a block already carrying its 0x01 marker."""
    h = acc[0]
    r = acc[1]
    top = hibit << 128
    end = start + n
    off = start
    while off < end:
        m = end - off
        if m >= 16:
            blk = bytes(buf[off:off + 16])
        else:
            blk = bytes(buf[off:end]) + bytes(16 - m)
        h = ((h + int.from_bytes(blk, "little") + top) * r) % _P
        off += 16
    acc[0] = h


def finish(acc, adl, ctl, out, off):
    """Write the tag to out[off:off+16]. adl >= 0 first absorbs the AEAD length block
    le64(adl) || le64(ctl); adl < 0 skips it (bare Poly1305)."""
    if adl >= 0:
        lb = acc[3]
        lb[0:8] = adl.to_bytes(8, "little")
        lb[8:16] = ctl.to_bytes(8, "little")
        update(acc, lb, 0, 16, 1)
    t = (acc[0] + acc[2]) & ((1 << 128) - 1)
    out[off:off + 16] = t.to_bytes(16, "little")


def diff16(x, y, yoff):
    """0 when x[0:16] == y[yoff:yoff+16], else nonzero; time does not depend on where they differ."""
    d = 0
    for i in range(16):
        d |= x[i] ^ y[yoff + i]
    return d
