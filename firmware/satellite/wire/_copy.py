# Pure-Python byte copy for the framer (fallback for _copy_viper): same contract, may allocate a view.


def copy(dst, dpos, src, spos, n):
    """Copy src[spos:spos+n] to dst[dpos:dpos+n]; safe for a front-ward move inside one buffer.

    A whole-object source is assigned directly (no allocation); a partial source goes through a
    memoryview slice, which allocates one view object on micropython.
    """
    if n <= 0:
        return
    if spos == 0 and n == len(src) and src is not dst:
        dst[dpos:dpos + n] = src
    else:
        dst[dpos:dpos + n] = memoryview(src)[spos:spos + n]
