# bench only: the one function of CPython's bisect that minipb uses, for the micropython unix port (which has
# no bisect). minipb is the pure-Python protobuf library our codec is compared with (bench_codec.py).
def bisect_right(a, x, lo=0, hi=None):
    hi = len(a) if hi is None else hi
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo
