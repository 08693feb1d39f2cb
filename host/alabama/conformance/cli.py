"""`alabama conformance codec-echo`: pipe Envelope records through the firmware codec under micropython.

The work happens in ``codec_echo.py`` under the real ``micropython`` unix port; this module finds
the interpreter, sets MICROPYPATH to the firmware tree, and offers record helpers for tests.
"""
import asyncio
import os
import pathlib
import struct
import subprocess
import sys

from .. import REPO
from ..errors import AlabamaError, listen_error
from ..local import find_micropython
from .. import usage

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
    p = subparsers.add_parser("conformance", help="score a core or a satellite against the spec's requirements, or run "
                                                  "firmware code under micropython for differential tests")
    sub = p.add_subparsers(dest="conformance_command", metavar="RUNNER")
    c = sub.add_parser("core", help="score a core: a scripted satellite, one row per requirement ID",
                       description="Connects to the core at HOST:PORT as a scripted satellite (Noise over TCP, "
                                   "fresh keys) and checks every core-side requirement a peer can observe; prints one "
                                   "row per requirement ID: pass, fail (with the frames that show it) or not "
                                   "observable. Exit 0 when nothing failed (docs/conformance.md).")
    c.add_argument("address", metavar="HOST:PORT", help="the core to score")
    c.add_argument("--core-key", metavar="HEX", help="the core's static public key (64 hex digits): checked against "
                                                     "the key it presents; without it the key learnt over XX is used "
                                                     "for the IK session")
    c.add_argument("--token", metavar="T", help="a pairing token the core minted (checks R7.3-b: Paired)")
    c.add_argument("--json", action="store_true", help="the rows as JSON on stdout")
    c.add_argument("--junit", metavar="FILE", help="also write the rows as a JUnit XML file")
    c.add_argument("--step-timeout", type=usage.positive(), default=None, metavar="S",
                   help="seconds any one wait may take (default 5)")
    c.set_defaults(func=_run_core)
    s = sub.add_parser("satellite",
                       help="score a satellite: a scripted core it connects to, one row per requirement ID",
                       description="Listens at HOST:PORT as a core (Noise responder, a fresh static key it prints); "
                                   "provision the satellite with that address only and start it. The kit drives it "
                                   "through every satellite-side requirement a core can observe (pings, unknown "
                                   "fields and arms, a render, a RequestCapture and its cancel, a button press, "
                                   "pairing and reconnections) and prints one row per requirement ID: pass, fail "
                                   "(with the frames that show it) or not observable. Exit 0 when nothing failed "
                                   "(docs/conformance.md).")
    s.add_argument("--listen", required=True, metavar="HOST:PORT", help="where the kit listens (port 0: any free one, "
                                                                        "printed)")
    hook = s.add_mutually_exclusive_group()
    hook.add_argument("--ctl-port", type=usage.tcp_port(), metavar="N",
                      help="a virtual board's control port (`alabama board sim` prints it): the kit presses its "
                           "button itself")
    hook.add_argument("--hook", metavar="CMD", help="a command the kit runs as `CMD press` and `CMD release` to push "
                                                    "the satellite's button (e.g. a relay on a bench)")
    hook.add_argument("--no-prompt", action="store_true", help="never ask a person to press the button (the rows "
                                                                 "that need it are judged on the RequestCapture alone)")
    s.add_argument("--json", action="store_true", help="the rows as JSON on stdout")
    s.add_argument("--junit", metavar="FILE", help="also write the rows as a JUnit XML file")
    s.add_argument("--step-timeout", type=usage.positive(), default=None, metavar="S",
                   help="seconds any one wait may take (default 5)")
    s.add_argument("--connect-timeout", type=usage.positive(), default=None, metavar="S",
                   help="seconds to wait for the satellite's first connection (default 120)")
    s.add_argument("--watch-timeout", type=usage.positive(), default=None, metavar="S",
                   help="seconds the kit watches for a forbidden reconnection: XX after a failed IK, a retry after "
                        "Rejected (default 8; give more than the satellite's longest reconnect backoff)")
    s.set_defaults(func=_run_satellite)
    e = sub.add_parser(
        "codec-echo", help="filter: length-prefixed Envelopes on stdin -> re-encoded by the firmware codec on stdout",
        description="Reads records `u32 big-endian length | Envelope` from stdin and writes, per record, the "
                    "Envelope decoded and re-encoded by firmware/satellite/wire under micropython, or "
                    "`FF FF FF FF | u32 length | CODE field` when the codec refuses it (docs/codec.md).")
    e.set_defaults(func=_run_codec_echo)


def _run_codec_echo(args):
    sys.stdout.flush()
    r = subprocess.run([micropython_cmd(), str(SCRIPT)], stdin=sys.stdin.buffer, stdout=sys.stdout.buffer,
                       env=_env())
    if r.returncode != 0:
        raise ConformanceError("codec-echo under micropython exited %d" % r.returncode)
    return 0


def _address(text, what, zero_ok=False):
    from ..errors import UsageError
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not (0 if zero_ok else 1) <= int(port) < 65536:
        raise UsageError("%r: give %s as HOST:PORT, e.g. 127.0.0.1:7355" % (text, what))
    return host, port


def _write_junit(path, text):
    try:
        pathlib.Path(path).write_text(text)
    except OSError as e:
        raise ConformanceError("cannot write --junit %s: %s" % (path, e.strerror or e)) from None


def _run_core(args):
    from ..errors import UsageError
    from . import corekit, rows
    from .probes import NOTHING_LISTENS
    host, port = _address(args.address, "the core")
    key = None
    if args.core_key is not None:
        try:
            key = bytes.fromhex(args.core_key)
        except ValueError:
            key = b""
        if len(key) != 32:
            raise UsageError("--core-key %r: give the core's static public key as 64 hex digits "
                             "(`alabama core key` prints it)" % args.core_key)
    result = corekit.run(host.strip("[]"), int(port), core_key=key, token=args.token,
                         step_s=args.step_timeout or corekit.STEP_S)
    target = "%s:%s" % (host, port)
    gate = next((r for r in result if r.rid == "R5.1.1-a"), None)
    if gate is not None and gate.verdict == rows.FAIL and NOTHING_LISTENS in gate.detail \
            and not (args.json or args.junit):      # a typo'd port: nothing to judge, not 40 rows saying so
        raise ConformanceError("nothing listens on %s: start the core there (`alabama core serve --listen %s`), or "
                               "give the address its `listening on` line says" % (target, target))   # server down: 1
    if gate is not None and gate.verdict == rows.FAIL and not rows.counts(result)[rows.PASS] \
            and not (args.json or args.junit):      # another program there (a web server): no session, no row judged
        raise ConformanceError("no session with %s, so no row could be judged (%s): is it an Alabama core? Give the "
                               "address `alabama core serve` prints as `listening on` (--json or --junit write every "
                               "row anyway)" % (target, gate.detail.split(": is an Alabama core")[0]))
    if args.junit:
        _write_junit(args.junit, rows.junit_xml(result, target, "core"))
    print(rows.as_json(result, target, "core") if args.json else rows.render_text(result, target))
    return 1 if rows.counts(result)[rows.FAIL] else 0


def _run_satellite(args):
    import shlex
    import socket
    from . import rows, satkit
    host, port = _address(args.listen, "where the kit listens", zero_ok=True)
    if args.junit and not pathlib.Path(args.junit).resolve().parent.is_dir():
        raise ConformanceError("cannot write --junit %s: no directory %s" % (
            args.junit, pathlib.Path(args.junit).resolve().parent))
    press = prompt = None
    if args.ctl_port is not None:
        from ..board import simctl
        simctl.send(args.ctl_port, "state")          # a wrong port is said now, not after the first rows

        def press(down):
            simctl.send(args.ctl_port, "press" if down else "release")
    elif args.hook:
        cmd = shlex.split(args.hook)

        def press(down):
            try:
                r = subprocess.run(cmd + ["press" if down else "release"], capture_output=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise ConformanceError("--hook %r did not run: %s" % (args.hook, e)) from None
            if r.returncode:
                raise ConformanceError("--hook %r exited %d" % (args.hook, r.returncode))
    elif not args.no_prompt and sys.stdin.isatty():
        def prompt(text):
            print(">>> " + text, file=sys.stderr, flush=True)
    try:
        kit = satkit.SatKit(host.strip("[]"), int(port), press=press, prompt=prompt,
                            step_s=args.step_timeout or satkit.STEP_S,
                            connect_s=args.connect_timeout or satkit.CONNECT_S,
                            watch_s=args.watch_timeout or satkit.WATCH_S,
                            say=lambda text: print(text, file=sys.stderr, flush=True))
        result = asyncio.run(kit.run())
    except OSError as e:
        if isinstance(e, socket.gaierror) or e.errno is not None:      # in use, not ours, no such name: the usual
            raise listen_error(e, host.strip("[]"), int(port), "--listen") from None     # line, saying what to do
        raise
    target = "%s:%d" % (host, kit.port)
    if args.junit:
        _write_junit(args.junit, rows.junit_xml(result, target, "satellite"))
    print(rows.as_json(result, target, "satellite") if args.json
          else rows.render_text(result, target, kind="satellite"))
    return 1 if rows.counts(result)[rows.FAIL] else 0
