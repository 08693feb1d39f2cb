# Conformance filter (runs under micropython): length-prefixed Envelopes in, re-encoded ones out; no other logic.
"""stdin: records ``u32 big-endian length | Envelope bytes``. stdout, one record per input record:
``u32 length | Envelope re-encoded by satellite.wire after decoding it``, or for input the codec
refuses ``FF FF FF FF | u32 length | "CODE Message.field"`` (UTF-8). Exit 0 at end of input.
"""
import sys

from satellite.wire import alabama_v1 as v1, pb

_MAX_RECORD = 1 << 20  # larger records are refused (OVER_BOUND record) and skipped, never buffered
_REFUSED = b"\xff\xff\xff\xff"


def _read_exact(inp, n):
    parts = []
    got = 0
    while got < n:
        b = inp.read(min(n - got, 65536))
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def _u32(n):
    return bytes(((n >> 24) & 0xFF, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF))


def _refuse(out, code, field):
    line = (code + " " + (field or "-")).encode()
    out.write(_REFUSED)
    out.write(_u32(len(line)))
    out.write(line)


def main():
    inp = sys.stdin.buffer
    out = sys.stdout.buffer
    env = v1.Envelope()
    while True:
        head = _read_exact(inp, 4)
        if not head:
            break
        if len(head) < 4:
            _refuse(out, "TRUNCATED", "record")
            break
        n = (head[0] << 24) | (head[1] << 16) | (head[2] << 8) | head[3]
        if n > _MAX_RECORD:
            _refuse(out, "OVER_BOUND", "record")
            while n > 0:
                skipped = len(_read_exact(inp, min(n, 65536)))
                if not skipped:
                    break
                n -= skipped
            continue
        data = _read_exact(inp, n)
        if len(data) < n:
            _refuse(out, "TRUNCATED", "record")
            break
        try:
            pb.decode_into(env, data, 0, n)
            enc = pb.encode(env)
        except (pb.DecodeError, pb.EncodeError) as e:
            _refuse(out, e.code, e.field)
            continue
        out.write(_u32(len(enc)))
        out.write(enc)
    try:
        out.flush()
    except AttributeError:  # micropython's stdout may have no flush
        pass


main()
