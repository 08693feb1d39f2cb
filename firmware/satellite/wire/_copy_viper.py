# Viper byte copy for the framer: moves n bytes between buffers without allocating; no other logic here.
import micropython


@micropython.viper
def copy(dst: ptr8, dpos: int, src: ptr8, spos: int, n: int):
    """Copy src[spos:spos+n] to dst[dpos:dpos+n], front to back.

    Safe when dst and src are the same buffer and dpos <= spos (the framer's compaction moves data
    towards the front). Indices are not checked: the caller bounds them.
    """
    d = dpos
    s = spos
    e = spos + n
    # Word-at-a-time would need alignment care on xtensa; a byte loop in viper is already ~native speed.
    while s < e:
        dst[d] = src[s]
        d += 1
        s += 1
