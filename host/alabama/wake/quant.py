"""TFLite's integer requantization arithmetic, in Python ints: responsible for QuantizeMultiplier and
MultiplyByQuantizedMultiplier exactly as TFLite's reference kernels round (the double rounding: a rounding doubling
high multiply, then a rounding right shift, halves away from zero), and the variant of TFLite's optimized int8
DEPTHWISE_CONV_2D (DepthwiseConvRound kUpward: halves of the final shift rounded up); not for reading models or
running a graph."""
import math

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def quantize_multiplier(real):
    """(multiplier, shift) with real == multiplier * 2**(shift - 31), multiplier in [2**30, 2**31) (or 0)."""
    if real == 0.0:
        return 0, 0
    frac, shift = math.frexp(real)
    q = int(math.floor(abs(frac) * (1 << 31) + 0.5))        # std::round: half away from zero (frac > 0 here)
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, shift


def _sat_rounding_doubling_high_mul(a, b):
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    v = ab + nudge
    q = abs(v) >> 31                                        # C++ int64 division truncates toward zero
    return q if v >= 0 else -q


def _rounding_divide_by_pot(x, exponent, upward=False):
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 and not upward else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def _wrap32(x):
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def multiply_by_quantized_multiplier(x, multiplier, shift, upward=False):
    """upward=True: the final shift rounds halves toward +inf (TFLite's optimized depthwise kernel)."""
    left = shift if shift > 0 else 0
    right = 0 if shift > 0 else -shift
    return _rounding_divide_by_pot(_sat_rounding_doubling_high_mul(_wrap32(x << left), multiplier), right, upward)
