# Byte copy between buffers at offsets, in viper: the transport reader's allocation-free memmove.
# Imported only where @micropython.viper exists; transport.py has the pure fallback. No I/O.
import micropython


@micropython.viper
def copy(dst: ptr8, doff: int, src: ptr8, soff: int, n: int):
    """dst[doff:doff+n] = src[soff:soff+n] (non-overlapping buffers); allocates nothing."""
    i = 0
    while i < n:
        dst[doff + i] = src[soff + i]
        i += 1
