# Viper byte copy for the framer: moves n bytes between buffers without allocating; no other logic here.
import micropython


@micropython.viper
def copy(dst: ptr8, dpos: int, src: ptr8, spos: int, n: int):
    """Copy src[spos:spos+n] to dst[dpos:dpos+n], front to back, 32-bit words where both ends
    share an alignment (xtensa faults on unaligned word access, so only aligned words are used).

    Safe when dst and src are the same buffer and dpos <= spos (the framer's compaction moves data
    towards the front): every word is read before any store reaches it. Indices are not checked:
    the caller bounds them.
    """
    d = uint(dst) + uint(dpos)
    s = uint(src) + uint(spos)
    e = s + uint(n)
    if (d & 3) == (s & 3):
        while (s & 3) and s < e:
            ptr8(d)[0] = ptr8(s)[0]
            d += 1
            s += 1
        ew = s + ((e - s) & uint(0xFFFFFFFC))  # n < 2**32, so the mask is right at 32 and 64 bits
        while s < ew:
            ptr32(d)[0] = ptr32(s)[0]
            d += 4
            s += 4
    while s < e:
        ptr8(d)[0] = ptr8(s)[0]
        d += 1
        s += 1
