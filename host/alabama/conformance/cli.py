"""`alabama conformance codec-echo`: pipe Envelope records through the firmware codec under micropython.

The work happens in ``codec_echo.py`` under the real ``micropython`` unix port; this module finds
the interpreter, sets MICROPYPATH to the firmware tree, and offers record helpers for tests.
"""
import os
import pathlib
import struct
import subprocess
import sys

from .. import REPO
from ..errors import AlabamaError
from ..local import find_micropython

SCRIPT = pathlib.Path(__file__).resolve().parent / "codec_echo.py"
REFUSED = b"\xff\xff\xff\xff"


class ConformanceError(AlabamaError):
    """The firmware runner could not run or broke the record protocol."""


def micropython_cmd():
    return find_micropython(ConformanceError)


def _env():
    e = dict(os.environ)
    e["MICROPYPATH"] = str(REPO / "firmware")
    return e


def pack_records(messages):
    """Input records for codec-echo: ``u32 BE length | bytes`` per message."""
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def unpack_output(data):
    """Output of codec-echo -> list of ``(True, envelope_bytes)`` or ``(False, "CODE field")``."""
    out = []
    p = 0
    while p < len(data):
        if len(data) - p < 4:
            raise ConformanceError("codec-echo output ends inside a record header at byte %d" % p)
        head = data[p:p + 4]
        p += 4
        ok = head != REFUSED
        if not ok:
            head = data[p:p + 4]
            p += 4
        (n,) = struct.unpack(">I", head)
        body = data[p:p + n]
        if len(body) != n:
            raise ConformanceError("codec-echo output ends inside a record at byte %d" % p)
        p += n
        out.append((True, body) if ok else (False, body.decode("utf-8")))
    return out


def codec_echo(records, timeout=600):
    """Run the firmware codec under micropython on ``records`` (bytes); return its raw output."""
    r = subprocess.run([micropython_cmd(), str(SCRIPT)], input=records, capture_output=True,
                       timeout=timeout, env=_env())
    if r.returncode != 0:
        raise ConformanceError("codec-echo under micropython exited %d: %s"
                               % (r.returncode, r.stderr.decode(errors="replace").strip()[-2000:]))
    return r.stdout


def register(subparsers):
    p = subparsers.add_parser("conformance", help="run firmware code under micropython for differential tests")
    sub = p.add_subparsers(dest="conformance_command", metavar="RUNNER")
    e = sub.add_parser(
        "codec-echo", help="filter: length-prefixed Envelopes on stdin -> re-encoded by the firmware codec on stdout",
        description="Reads records `u32 big-endian length | Envelope` from stdin and writes, per record, the "
                    "Envelope decoded and re-encoded by firmware/satellite/wire under micropython, or "
                    "`FF FF FF FF | u32 length | CODE field` when the codec refuses it (docs/codec.md).")
    e.set_defaults(func=_run_codec_echo)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run_codec_echo(args):
    sys.stdout.flush()
    r = subprocess.run([micropython_cmd(), str(SCRIPT)], stdin=sys.stdin.buffer, stdout=sys.stdout.buffer,
                       env=_env())
    if r.returncode != 0:
        raise ConformanceError("codec-echo under micropython exited %d" % r.returncode)
    return 0
