"""`alabama provision qr|sound|serial`: deliver a provisioning record to a satellite.

Responsible for the command line: where the record comes from (a pairing token minted from the core's
state directory, or a record given in hex, e.g. from `alabama core token`), field overrides, and which
carrier moves it. The carriers are ``qr``, ``sound`` and ``serial``; the record codec is ``record``.
"""
import datetime
import sys
import time

from .. import CORE_PORT
from ..errors import UsageError
from ..local import lan_address
from . import record

DEFAULT_TTL_S = 600


def register(sub):
    p = sub.add_parser("provision", help="deliver a provisioning record: QR code, sound (ggwave) or serial",
                       description="Give a satellite the core's address, key and a pairing token (spec §7.3). "
                                   "The record comes from the core's state directory (--data: a fresh token is "
                                   "minted) or from `alabama core token` (--record HEX).")
    psub = p.add_subparsers(dest="provision_command", metavar="CARRIER")
    p.set_defaults(func=lambda args: p.print_help() or 2)

    q = psub.add_parser("qr", help="show the record as a QR code (terminal, PNG): phones, camera boards")
    _record_options(q, port_flag=True)
    q.add_argument("--png", metavar="FILE", help="also write the QR code as a PNG")
    q.add_argument("--ansi", action="store_true", help="draw with ANSI colours, two columns per module (default: "
                                                       "compact Unicode half blocks)")
    q.add_argument("--no-terminal", action="store_true", help="do not draw the code in the terminal")
    q.set_defaults(func=cmd_qr)

    s = psub.add_parser("sound", help="send the record as sound (ggwave [DT] Fastest): boards listen for it")
    _record_options(s, port_flag=True)
    out = s.add_mutually_exclusive_group()
    out.add_argument("--wav", metavar="FILE", help="write the sound to a 16-bit mono WAV")
    out.add_argument("--play", action="store_true", help="play it on this computer's speaker")
    s.add_argument("--rate", type=int, default=48000, choices=(48000, 16000),
                   help="WAV sample rate (default %(default)s; 16000 is what `alabama board sim --mic` takes)")
    s.add_argument("--volume", type=int, default=50, help="ggwave volume 1..100 (default %(default)s)")
    s.set_defaults(func=cmd_sound)

    r = psub.add_parser("serial", help="write the record to a board over USB serial (mpremote), then reset it")
    r.add_argument("--port", metavar="PORT", help="the board's serial port (default: the one Espressif USB device)")
    _record_options(r, port_flag=False)
    r.add_argument("--no-reset", action="store_true", help="leave the board in the REPL (no soft reset)")
    r.set_defaults(func=cmd_serial)


def _record_options(p, port_flag):
    g = p.add_argument_group("the record")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", metavar="DIR", help="the core's state directory: mint a pairing token there and "
                                                    "take the core's key from it")
    src.add_argument("--record", metavar="HEX", help="a record as `alabama core token` prints it")
    g.add_argument("--ttl", type=int, default=None, metavar="S",
                   help="with --data: seconds the token stays valid (default %d)" % DEFAULT_TTL_S)
    g.add_argument("--no-key", action="store_true",
                   help="leave the core key out (the board pairs over XX with the token, then pins the key)")
    g.add_argument("--host", "--core-host", dest="core_host", metavar="H",
                   help="the core's address (with --data default: this machine's LAN address)")
    ports = ("--port", "--core-port") if port_flag else ("--core-port",)
    g.add_argument(*ports, dest="core_port", type=int, metavar="P",
                   help="the core's TCP port (with --data default %d)" % CORE_PORT)
    g.add_argument("--wifi-ssid", metavar="S", help="Wi-Fi network for the board")
    g.add_argument("--wifi-passphrase", metavar="P", help="its WPA2 passphrase")
    g.add_argument("--release-key", metavar="PUBFILE", help="pin this Ed25519 release key (the .pub of `alabama "
                   "release-key`): the board then takes only firmware updates signed by it (alabama ota --sign-key)")


def _when(ts):
    return datetime.datetime.fromtimestamp(ts).isoformat(timespec="seconds")


def build_record(args, out=print, now=time.time):
    """(record bytes, ProvisioningRecord) from the command line; prints what it minted or found."""
    release_key = None
    if getattr(args, "release_key", None):       # read first: a bad key file must not cost a pairing token
        from ..board.signing import load_public
        release_key = load_public(args.release_key)
    if args.record is not None:
        if args.ttl is not None:
            raise UsageError("--ttl mints a token: use it with --data, not --record")
        try:
            raw = bytes.fromhex(args.record.strip())
        except ValueError:
            raise UsageError("--record is hex, as `alabama core token` prints it after 'record '") from None
        rec = record.decode(raw)
    else:
        from ..core import datadir, registry as reg
        args.data = datadir.resolve(args.data)   # a typo must not mint a token under a brand-new core key
        ttl = DEFAULT_TTL_S if args.ttl is None else args.ttl
        token, expires = reg.Registry(args.data).mint_token(ttl)
        rec = record.build(lan_address(), CORE_PORT, reg.server_public_key(args.data), token, expires)
        out("token %s expires %s (in %d s)" % (token, _when(expires), ttl))
    if args.core_host is not None:
        rec.core_host = args.core_host
    if args.core_port is not None:
        if not 0 < args.core_port < 65536:
            raise UsageError("the core port is 1..65535, got %d" % args.core_port)
        rec.core_port = args.core_port
    if args.no_key:
        rec.core_key = b""
    if args.wifi_ssid is not None:
        rec.wifi_ssid = args.wifi_ssid
    if args.wifi_passphrase is not None:
        rec.wifi_passphrase = args.wifi_passphrase
    if release_key is not None:
        rec.release_key = release_key
    if not rec.core_host or not rec.core_port:
        raise UsageError("the record has no core address: pass --host H and --port P")
    if rec.pairing_token and rec.token_expires and rec.token_expires <= now():
        out("warning: the record's pairing token expired at %s: the core will not pair the board with it "
            "(mint a new one: --data DIR)" % _when(rec.token_expires))
    data = _encode(rec, getattr(args, "provision_command", None))
    out("record %s (%d bytes): core %s:%d, %s, %s%s%s" % (
        data.hex(), len(data), rec.core_host, rec.core_port,
        "core key %s... (IK)" % rec.core_key[:4].hex() if rec.core_key else "no core key (XX)",
        "pairing token" if rec.pairing_token else "no token", ", Wi-Fi %s" % rec.wifi_ssid if rec.wifi_ssid else "",
        ", release key %s... pinned" % rec.release_key[:4].hex() if rec.release_key else ""))
    return data, rec


def _encode(rec, carrier):
    # Sound carries at most 140 bytes (ggwave); QR and serial carry any record within the field bounds.
    return record.encode(rec, record.SOUND_MAX_BYTES if carrier == "sound" else record.MAX_RECORD_BYTES)


def cmd_qr(args):
    from . import qr, uri
    data, _ = build_record(args)
    text = uri.to_uri(data)
    print("uri %s" % text)
    symbol = qr.make(text)
    if not args.no_terminal:
        qr.terminal(symbol, sys.stdout, compact=not args.ansi)
    print("QR version %s (%dx%d modules)" % (symbol.designator, symbol.symbol_size(border=0)[0],
                                               symbol.symbol_size(border=0)[1]))
    if args.png:
        print("wrote %s" % qr.save_png(symbol, args.png))
    return 0


def cmd_sound(args):
    from . import sound
    if not args.wav and not args.play:
        raise UsageError("say where the sound goes: --wav FILE (then play it near the board) or --play")
    data, _ = build_record(args)
    wav = sound.wav_bytes(data, rate=args.rate, volume=args.volume)
    secs = sound.duration_s(len(data))
    if args.wav:
        try:
            with open(args.wav, "wb") as f:
                f.write(wav)
        except OSError as e:
            raise UsageError("cannot write %s: %s" % (args.wav, e.strerror or e)) from None
        print("wrote %s (%d Hz, %.1f s of ggwave [DT] Fastest): play it within a metre of the board's "
              "microphone while its LED shows listening mode" % (args.wav, args.rate, secs))
    if args.play:
        print("playing %.1f s of ggwave [DT] Fastest: hold the speaker near the board's microphone" % secs)
        player = sound.play(wav)
        print("played with %s" % player)
    return 0


def cmd_serial(args):
    from . import serial
    data, rec = build_record(args)
    serial.provision(args.port, data, rec.core_key, reset=not args.no_reset)
    return 0
