#!/usr/bin/env python3
"""Generates firmware/satellite/noise/_x25519_viper.py: the unrolled viper field arithmetic for X25519.

The output is reproducible byte for byte; `--check` exits 1 when the committed file has drifted.
Representation (explained again in the generated module): 20 limbs of 13 bits, radix 2**13,
every limb non-negative and <= _L = 8194 between operations, 2**260 == 608 (mod p).
"""
import sys
import pathlib

OUT = pathlib.Path(__file__).resolve().parent.parent / "firmware" / "satellite" / "noise" / "_x25519_viper.py"
N = 20          # limbs
W = 13          # bits per limb
MASK = (1 << W) - 1
FOLD = 608      # 2**260 mod p = 32 * 19
P = 2**255 - 19
L = 8194        # invariant bound on every limb of a field element between operations


def _q64p():
    """Limbs of 64*p = 2**261 - 1216, borrowed so every limb exceeds L (used by subtraction)."""
    q = [2 * MASK] * N
    q[0] = 2 * (MASK + 1 - FOLD)
    assert sum(v << (W * i) for i, v in enumerate(q)) == 64 * P
    assert min(q) > L
    return q


Q = _q64p()


def _check_bounds():
    """The arithmetic behind the comment block in the generated module (all must hold)."""
    lim = 2**31 - 1
    col = N * L * L                                 # a full column: 20 products of limbs <= L
    top_carry = lim >> W                             # any carry out of a value < 2**31
    assert col + FOLD * MASK + top_carry <= lim      # low column + folded high limb + carry in
    # mul/sq: carry out of column 19, folded into limb 0, then rippled to limbs 1 and 2
    c19 = (col + FOLD * ((N * L * L) >> W) + top_carry) >> W
    t0 = MASK + FOLD * c19
    assert t0 <= lim
    t1 = MASK + (t0 >> W)
    assert MASK + (t1 >> W) <= L
    # add/sub: columns <= L + 16382 + carry; mla: L + 121665*L + carry
    for colmax in (2 * L + 2, L + max(Q) + 4, L + 121665 * L + top_carry, 9 * L + top_carry):
        assert colmax <= lim
        t0 = MASK + FOLD * (colmax >> W)
        assert t0 <= lim
        t1 = MASK + (t0 >> W)
        assert MASK + (t1 >> W) <= L, colmax
    return col


def _cols(k):
    return [(i, k - i) for i in range(N) if 0 <= k - i < N]


def _mul_terms(k):
    return ["a%d * b%d" % (i, j) for i, j in _cols(k)]


def _col_lines(k, first, terms_of, sq):
    """Column k accumulated in the register local Q, one product per statement ("Q = x * y + Q": the
    native emitter keeps Q in a register, so a product costs two stack loads, MULL and ADD; one long
    sum expression makes it spill its value stack instead). On entry Q holds the previous column."""
    out = []
    if not sq:
        terms = terms_of(k)
        out.append("Q = %s" % terms[0] if first else "Q = (Q >> %d) + %s" % (W, terms[0]))
        out += ["Q = %s + Q" % t for t in terms[1:]]
        return out
    cross = ["a%d * a%d" % (i, j) for i, j in _cols(k) if i < j]
    square = "a%d * a%d" % (k // 2, k // 2) if k % 2 == 0 else None
    if not cross:
        out.append("Q = %s" % square if first else "Q = (Q >> %d) + %s" % (W, square))
        return out
    if not first:
        out.append("T = Q >> %d" % W)      # the carry waits in T while Q sums the cross products
    out.append("Q = %s" % cross[0])
    out += ["Q = %s + Q" % t for t in cross[1:]]
    out.append("Q = Q + Q" if first else "Q = Q + Q + T")
    if square:
        out.append("Q = %s + Q" % square)
    return out


def _reduce(sq, ind):
    """Lines that turn the 39 product columns into 20 limbs stored in d (see module comment)."""
    out = []
    # high columns 20..38, carried as they are produced, kept as h0..h19 (< 2**13, h19 small)
    for k in range(N, 2 * N - 1):
        out += _col_lines(k, k == N, _mul_terms, sq)
        out.append("h%d = Q & %d" % (k - N, MASK))
    out.append("h%d = Q >> %d" % (N - 1, W))
    # low columns plus 608 * high limb; limbs 0..2 wait in locals for the wrap-around carry
    for k in range(N):
        out += _col_lines(k, k == 0, _mul_terms, sq)
        out.append("Q = %d * h%d + Q" % (FOLD, k))
        out.append(("r%d = Q & %d" if k < 3 else "d[%d] = Q & %d") % (k, MASK))
    out += [s.replace("t", "Q") for s in _wrap()]
    return [ind + s for s in out]


def _wrap():
    return [
        "t = r0 + %d * (t >> %d)" % (FOLD, W),
        "d[0] = t & %d" % MASK,
        "t = r1 + (t >> %d)" % W,
        "d[1] = t & %d" % MASK,
        "d[2] = r2 + (t >> %d)" % W,
    ]


def _chains(specs, ind):
    """Carried limb-wise chains, interleaved limb by limb so that every source limb k is read before
    any destination limb k is written (safe when a destination aliases a source). specs is a list of
    (dst, carry_var, term(k)); limbs 0..2 wait in locals for the same wrap-around as multiplication."""
    out = []
    for k in range(N):
        for j, (dst, t, term) in enumerate(specs):
            e = term(k)
            if k:
                e = "(%s >> %d) + %s" % (t, W, e)
            out.append("%s = %s" % (t, e))
            out.append(("r%d%s = %s & %d" % (k, "xyz"[j], t, MASK)) if k < 3
                       else "%s[%d] = %s & %d" % (dst, k, t, MASK))
    for j, (dst, t, term) in enumerate(specs):
        out += [s.replace("d[", dst + "[").replace("t", t).replace("r0", "r0" + "xyz"[j])
                 .replace("r1", "r1" + "xyz"[j]).replace("r2", "r2" + "xyz"[j]) for s in _wrap()]
    return [ind + s for s in out]


# opcodes of the little field-op program run by _run (one call per X25519: no per-op call overhead)
OPS = {"END": 0, "MUL": 1, "SQ": 2, "ADDSUB": 3, "SUB": 4, "MLA": 5, "BIT": 6, "LOOP": 7, "SWAP": 8, "MUL9": 9}
# slots (20 limbs = 80 bytes each) of the state buffer
X1, X2, Z2, X3, Z3, SA, SB, SC, SD, SE, ST = range(11)
NSLOTS = 11


def program(base=False):
    """The whole X25519 after decoding u: RFC 7748 ladder (bits 254..0) then z2 ** (p-2) and x2 * 1/z2.
    base: u is the base point 9 (public keys, the Noise ephemeral): z3 = 9 * (DA - CB)^2 is a small
    multiple (MUL9, ~a tenth of a MUL) instead of a multiplication by x1."""
    prog = []

    def op(name, d=0, a=0, b=0):
        assert name != "ADDSUB" or (d + 1 not in (a, b) and d not in (a, b))
        prog.append((OPS[name], d, a, b))
    top = len(prog)
    op("BIT")                       # conditional swap (x2, z2) <-> (x3, z3) driven by scalar bit i
    op("ADDSUB", SA, X2, Z2)        # A = x2 + z2, B = x2 - z2 (slots SA, SB)
    op("ADDSUB", SC, X3, Z3)        # C = x3 + z3, D = x3 - z3 (slots SC, SD)
    op("SQ", X2, SA, 1)             # AA
    op("SQ", Z2, SB, 1)             # BB
    op("MUL", SD, SD, SA)           # DA
    op("MUL", SC, SC, SB)           # CB
    op("ADDSUB", X3, SD, SC)        # DA + CB, DA - CB (slots X3, Z3)
    op("SQ", X3, X3, 1)             # x3 = (DA + CB)^2
    op("SQ", Z3, Z3, 1)
    if base:
        op("MUL9", Z3, Z3)          # z3 = 9 * (DA - CB)^2
    else:
        op("MUL", Z3, Z3, X1)       # z3 = x1 * (DA - CB)^2
    op("SUB", SE, X2, Z2)           # E = AA - BB
    op("MLA", SA, SE, X2)           # AA + a24 * E, a24 = 121665
    op("MUL", X2, X2, Z2)           # x2 = AA * BB
    op("MUL", Z2, SE, SA)           # z2 = E * (AA + a24 * E)
    op("LOOP", top)                 # i -= 1; back to top while i >= 0
    op("SWAP")                      # final conditional swap by the last bit
    # 1/z2 = z2 ** (2**255 - 21): 254 squarings, 11 multiplications (t0..t3 = SA..SD)
    op("SQ", SA, Z2, 1)             # z^2
    op("SQ", SB, SA, 2)             # z^8
    op("MUL", SB, SB, Z2)           # z^9
    op("MUL", SA, SA, SB)           # z^11
    op("SQ", SC, SA, 1)             # z^22
    op("MUL", SB, SB, SC)           # z^(2^5 - 1)
    op("SQ", SC, SB, 5)
    op("MUL", SB, SC, SB)           # z^(2^10 - 1)
    op("SQ", SC, SB, 10)
    op("MUL", SC, SC, SB)           # z^(2^20 - 1)
    op("SQ", SD, SC, 20)
    op("MUL", SC, SD, SC)           # z^(2^40 - 1)
    op("SQ", SC, SC, 10)
    op("MUL", SB, SC, SB)           # z^(2^50 - 1)
    op("SQ", SC, SB, 50)
    op("MUL", SC, SC, SB)           # z^(2^100 - 1)
    op("SQ", SD, SC, 100)
    op("MUL", SC, SD, SC)           # z^(2^200 - 1)
    op("SQ", SC, SC, 50)
    op("MUL", SC, SC, SB)           # z^(2^250 - 1)
    op("SQ", SC, SC, 5)             # z^(2^255 - 2^5)
    op("MUL", Z2, SC, SA)           # z^(2^255 - 21)
    op("MUL", X2, X2, Z2)           # x2 / z2
    op("END")
    return bytes(v for ins in prog for v in ins)


def generate():
    col = _check_bounds()
    L_ = []
    w = L_.append
    for line in HEADER.strip("\n").split("\n"):
        w(line.format(L=L, COL=col, N=N, FM=FOLD * MASK, TC=(2**31 - 1) >> W,
                      SUM=col + FOLD * MASK + ((2**31 - 1) >> W), LIM=2**31 - 1, Q0=Q[0], Q1=Q[1],
                      SUBMAX=L + max(Q), MLAMAX=L + 121665 * L))
    prog = program()
    w("_PROG = %r" % prog)
    w("_PROG_BASE = %r  # the same for u = 9" % program(base=True))
    w("_SLOTS = const(%d)  # field elements in the state buffer (80 bytes each)" % NSLOTS)
    w("_X1 = const(%d)" % X1)
    w("_X2 = const(%d)" % X2)
    w("_BASEPOINT = b\"\\x09\" + bytes(31)")
    w("_TMP = const(%d)" % ST)
    w("")
    w("")
    w("@micropython.viper")
    w("def _run(T: int, Q: int, st: ptr32, prog: ptr8, k: ptr8):")
    w('    """Run the field-op program prog over the slots of st; k is the clamped scalar (BIT ops).')
    w('    T and Q are the two register locals of the native emitter (the caller passes 0, 0)."""')
    w("    base = int(st)")
    w("    i = 254")
    w("    swap = 0")
    w("    pc = 0")
    w("    while True:")
    w("        op = prog[pc]")
    w("        d = ptr32(base + prog[pc + 1] * 80)")
    w("        a = ptr32(base + prog[pc + 2] * 80)")
    w("        b = ptr32(base + prog[pc + 3] * 80)")
    w("        n = prog[pc + 3]")
    w("        pc += 4")
    w("        if op == %d:  # MUL: d = a * b (operands read into locals first: d may alias a or b)" % OPS["MUL"])
    for i in range(N):
        w("            a%d = a[%d]" % (i, i))
    for i in range(N):
        w("            b%d = b[%d]" % (i, i))
    L_ += _reduce(False, "            ")
    w("        elif op == %d:  # SQ: d = a ** (2 ** n), n >= 1 squarings in a row; d may alias a" % OPS["SQ"])
    w("            while n > 0:")
    for i in range(N):
        w("                a%d = a[%d]" % (i, i))
    L_ += _reduce(True, "                ")
    w("                a = d")
    w("                n -= 1")
    w("        elif op == %d:  # ADDSUB: d = a + b, next slot e = a - b + 64p" % OPS["ADDSUB"])
    w("            e = ptr32(base + prog[pc - 3] * 80 + 80)")
    L_ += _chains([("d", "Q", lambda k: "a[%d] + b[%d]" % (k, k)),
                   ("e", "T", lambda k: "a[%d] + %d - b[%d]" % (k, Q[k], k))], "            ")
    w("        elif op == %d:  # SUB: d = a - b + 64p (limbs stay non-negative)" % OPS["SUB"])
    L_ += _chains([("d", "Q", lambda k: "a[%d] + %d - b[%d]" % (k, Q[k], k))], "            ")
    w("        elif op == %d:  # MLA: d = b + 121665 * a" % OPS["MLA"])
    L_ += _chains([("d", "Q", lambda k: "b[%d] + 121665 * a[%d]" % (k, k))], "            ")
    w("        elif op == %d:  # MUL9: d = 9 * a" % OPS["MUL9"])
    L_ += _chains([("d", "Q", lambda k: "9 * a[%d]" % k)], "            ")
    w(CTRL.strip("\n"))
    w("")
    w("")
    w(TEMPLATE.strip("\n"))
    return "\n".join(L_) + "\n"


HEADER = """
# GENERATED by tools/gen_x25519_viper.py -- do not edit; change the generator and re-run it.
# X25519 (RFC 7748) field arithmetic and ladder in viper: fixed-time limb maths only, no I/O and no
# secret-dependent branch or memory index. Imported only where micropython has the viper emitter.
#
# A field element is {N} limbs of 13 bits (radix 2**13, 260 bits): one 80-byte slot of a bytearray
# used as ptr32. Invariant between operations: every limb is in [0, _L], _L = {L} (= 2**13 + 2);
# values are reduced mod p = 2**255 - 19 only by _tobytes. 2**260 = 32 * 2**255 == 608 (mod p).
# The whole scalar multiplication is ONE viper call (_run) interpreting the fixed op list _PROG
# (calling a viper function from bytecode costs ~1000 instructions, a ladder step needs 15 field ops).
#
# Overflow proof (viper int is 32-bit signed on the ESP32, so every intermediate must be < 2**31;
# all values are non-negative, so 64-bit viper on the unix port computes exactly the same bits):
#  * a product column sums at most 20 products of limbs <= {L}: 20 * {L}**2 = {COL}.
#  * MUL/SQ carry the high columns 20..38 first (each becomes 13 bits, h19 = final carry), then
#    column k < 20 gets + 608 * h_k <= {FM} and a carry-in <= (2**31 - 1) >> 13 = {TC}:
#    {COL} + {FM} + {TC} = {SUM} <= 2**31 - 1 = {LIM}.
#  * the carry out of column 19 is < 2**18; times 608 it is < 2**28 and goes into limb 0, whose
#    carry goes into limb 1 and that carry (<= 3) into limb 2, so limb 2 <= 8191 + 3 and every
#    other limb <= 8191: the result keeps the invariant (the generator asserts all of this).
#  * SQ doubles the cross products of a column (<= 10 pairs) and adds the square: same bound.
#    Every column is summed term by term into the register local Q (partial sums of non-negative
#    terms never exceed the column's total), the SQ carry-in waiting in T.
#  * ADDSUB/SUB add 64*p in borrowed limbs {Q0}, {Q1}, {Q1}, ... (each > _L, so no limb goes
#    negative): <= {SUBMAX}; MLA: {L} + 121665 * {L} = {MLAMAX}; MUL9: 9 * {L}. Carry and wrap as above.
#  * shifts only ever see non-negative values, so arithmetic == logical shift; every limb is
#    masked with 0x1fff explicitly; nothing relies on wrap-around.
import micropython
from micropython import const

_L = const({L})
"""

CTRL = """
        elif op == 6 or op == 8:  # BIT (scalar bit i) / SWAP (final): cswap (x2,z2) <-> (x3,z3)
            bit = 0
            if op == 6:
                bit = (k[i >> 3] >> (i & 7)) & 1
            m = 0 - (swap ^ bit)
            swap = bit
            a = ptr32(base + 80)
            b = ptr32(base + 240)
            j = 0
            while j < 40:
                Q = m & (a[j] ^ b[j])
                a[j] = a[j] ^ Q
                b[j] = b[j] ^ Q
                j += 1
        elif op == 7:  # LOOP: next scalar bit, back to instruction d while bits remain
            i -= 1
            if i >= 0:
                pc = prog[pc - 3] * 4
        else:  # END
            return
"""

TEMPLATE = """
@micropython.viper
def _frombytes(d: ptr32, s: ptr8):
    \"\"\"d = the 32-byte little-endian s with bit 255 ignored (RFC 7748 section 5); not reduced.\"\"\"
    acc = 0
    n = 0
    j = 0
    i = 0
    while i < 32:
        v = s[i]
        if i == 31:
            v = v & 0x7F
        acc = acc | (v << n)
        n += 8
        if n >= 13:
            d[j] = acc & 0x1FFF
            acc = acc >> 13
            n -= 13
            j += 1
        i += 1
    d[j] = acc


@micropython.viper
def _tobytes(out: ptr8, a: ptr32, t: ptr32):
    \"\"\"out[0:32] = a fully reduced mod p, little-endian; t is one slot of scratch. Fixed-time.\"\"\"
    # twice: carry into exact 13-bit limbs, then fold bits >= 255 (limb 19 holds bits 247..259)
    k = 0
    while k < 2:
        c = 0
        i = 0
        while i < 20:
            v = a[i] + c
            t[i] = v & 0x1FFF
            c = v >> 13
            i += 1
        v = t[19]
        t[19] = v & 0xFF
        c = 19 * ((v >> 8) + (c << 5))
        i = 0
        while i < 20:
            v = t[i] + c
            t[i] = v & 0x1FFF
            c = v >> 13
            i += 1
        a = t
        k += 1
    # now t < 2**255; t >= p exactly when t + 19 reaches bit 255: then keep t + 19 - 2**255
    c = 19
    i = 0
    while i < 20:
        v = t[i] + c
        c = v >> 13
        i += 1
    m = 0 - ((v >> 8) & 1)
    c = 19 & m
    i = 0
    while i < 20:
        v = t[i] + c
        t[i] = v & 0x1FFF
        c = v >> 13
        i += 1
    t[19] = t[19] & 0xFF
    acc = 0
    n = 0
    j = 0
    i = 0
    while i < 20:
        acc = acc | (t[i] << n)
        n += 13
        while n >= 8:
            out[j] = acc & 0xFF
            acc = acc >> 8
            n -= 8
            j += 1
        i += 1
    # 20 limbs count as 260 bits, so all 32 bytes have been written (limb 19 was cut to 8 bits)


def scalarmult(k, u):
    \"\"\"X25519 of the already clamped 32-byte scalar k and the 32-byte u; returns 32 bytes.\"\"\"
    st = bytearray(80 * _SLOTS)
    mv = memoryview(st)
    _frombytes(mv[80 * _X1:80 * _X1 + 80], u)
    st[80 * _X2] = 1                    # x2 = 1, z2 = 0
    st[80 * 3:80 * 4] = mv[0:80]        # x3 = x1
    st[80 * 4] = 1                      # z3 = 1
    _run(0, 0, st, _PROG_BASE if u == _BASEPOINT else _PROG, k)   # u is public: not a secret branch
    out = bytearray(32)
    _tobytes(out, mv[80 * _X2:80 * _X2 + 80], mv[80 * _TMP:80 * _TMP + 80])
    return bytes(out)
"""



def main(argv):
    text = generate()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print("%s is stale: run tools/gen_x25519_viper.py" % OUT)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print("wrote %s (%d lines)" % (OUT, text.count("\n")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
