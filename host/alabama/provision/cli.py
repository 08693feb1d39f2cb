"""`alabama provision qr|sound|serial`: deliver a provisioning record to a satellite.

Responsible for the command line: where the record comes from (a pairing token minted from the core's
state directory, or a record given in hex, e.g. from `alabama core token`), field overrides, and which
carrier moves it. The carriers are ``qr``, ``sound`` and ``serial``; the record codec is ``record``.
"""
import sys
import time

from .. import CORE_PORT
from ..errors import UsageError
from .. import usage
from ..local import lan_address, local_time
from . import record

DEFAULT_TTL_S = 600


def register(sub):
    p = sub.add_parser("provision", help="deliver a provisioning record: QR code, sound (ggwave) or serial",
                       description="Give a satellite the core's address, key and a pairing token (spec §7.3). "
                                   "The record comes from the core's state directory (--data: a fresh token is "
                                   "minted) or from `alabama core token` (--record HEX).")
    psub = p.add_subparsers(dest="provision_command", metavar="CARRIER")

    q = psub.add_parser("qr", help="show the record as a QR code (terminal, PNG): phones, camera boards")
    _record_options(q, port_flag=True)
    q.add_argument("--png", metavar="FILE", help="also write the QR code as a PNG")
    q.add_argument("--plain", action="store_true", help="draw without colours (segno's half blocks: reads on a "
                                                        "dark terminal theme only)")
    q.add_argument("--ansi", action="store_true", help="two columns per module (default: compact Unicode half "
                                                       "blocks); both set black and white explicitly, so the code "
                                                       "reads on light and dark themes")
    q.add_argument("--no-terminal", action="store_true", help="do not draw the code in the terminal")
    q.set_defaults(func=cmd_qr)

    s = psub.add_parser("sound", help="send the record as sound (ggwave [DT] Fastest): boards listen for it")
    _record_options(s, port_flag=True)
    out = s.add_mutually_exclusive_group()
    out.add_argument("--wav", metavar="FILE", help="write the sound to a 16-bit mono WAV")
    out.add_argument("--play", action="store_true", help="play it on this computer's speaker")
    s.add_argument("--rate", type=usage.positive(int, "Hz"), default=48000, choices=(48000, 16000),
                   help="WAV sample rate (default %(default)s; 16000 is what `alabama board sim --mic` takes)")
    s.add_argument("--volume", type=usage.between(int, 1, 100), default=50, help="ggwave volume 1..100 (default %(default)s)")
    s.set_defaults(func=cmd_sound)

    r = psub.add_parser("serial", help="write the record to a board over USB serial (mpremote), then reset it")
    r.add_argument("--port", metavar="PORT", help="the board's serial port (default: the one Espressif USB device)")
    _record_options(r, port_flag=False)
    r.add_argument("--no-reset", action="store_true", help="leave the board in the REPL (no soft reset)")
    r.add_argument("--factory-reset", action="store_true",
                   help="first forget the board's identity and settings (data/device.key, settings.json): the "
                        "fix for a damaged device.key; the core then sees a new device, paired by this token")
    r.set_defaults(func=cmd_serial)


def _record_options(p, port_flag):
    g = p.add_argument_group("the record")
    src = g.add_mutually_exclusive_group()
    from ..core import datadir, registry as reg
    src.add_argument("--data", metavar="DIR", help=datadir.data_help(
        "the core's state directory: mint a pairing token there and take the core's key from it") + " when "
        "--record is not given")
    src.add_argument("--record", metavar="HEX", help="a record as `alabama core token` prints it")
    g.add_argument("--ttl", type=usage.between(int, 1, reg.MAX_TTL_S, "seconds"), default=None, metavar="S",
                   help="with --data: seconds the token stays valid (default %d)" % DEFAULT_TTL_S)
    g.add_argument("--no-key", action="store_true",
                   help="leave the core key out (the board pairs over XX with the token, then pins the key)")
    g.add_argument("--host", "--core-host", dest="core_host", metavar="H",
                   help="the core's address (with --data default: this machine's LAN address)")
    ports = ("--port", "--core-port") if port_flag else ("--core-port",)
    g.add_argument(*ports, dest="core_port", type=usage.tcp_port(), metavar="P",
                   help="the core's TCP port (with --data default: the port its running core listens on, else %d)"
                   % CORE_PORT)
    p.set_defaults(core_port_option=ports[0])        # the flag a line about the port names
    g.add_argument("--wifi-ssid", metavar="S", help="the Wi-Fi network the board joins (up to 32 bytes)")
    g.add_argument("--wifi-passphrase", metavar="P", help="its WPA2 passphrase (8..63 characters; asked for "
                   "without echo when --wifi-ssid is given without it; empty: an open network)")
    g.add_argument(record.SHOW_SECRETS, action="store_true", help="print the record (and its URI) even when it "
                   "carries the Wi-Fi passphrase: the hex holds it in clear (default: not printed)")
    g.add_argument("--release-key", metavar="PUBFILE", help="pin this Ed25519 release key (the .pub of `alabama "
                   "release-key`): the board then takes only firmware updates signed by it (alabama ota --sign-key)")


def _when(ts):
    return local_time(ts)


def build_record(args, out=print, now=time.time, ask=None):
    """(record bytes, ProvisioningRecord) from the command line; prints what it minted or found.

    Everything is checked before a pairing token is minted (the release key file, the fields, the
    address, the record's size with a placeholder token of the real token's length): a refused record
    costs no token. ask(prompt) reads the Wi-Fi passphrase without echo (getpass) when --wifi-ssid is
    given without --wifi-passphrase."""
    if args.core_host is not None and record.host_problem(args.core_host):
        raise UsageError(record.host_problem(args.core_host))
    release_key = None
    if getattr(args, "release_key", None):
        from ..board.signing import load_public
        release_key = load_public(args.release_key)
    mint_ttl = None
    if args.record is not None:
        if args.ttl is not None:
            raise UsageError("--ttl mints a token: use it with --data, not --record")
        try:
            raw = bytes.fromhex(args.record.strip())
        except ValueError:
            raise UsageError("--record is hex, as `alabama core token` prints it after 'record '") from None
        try:
            rec = record.decode(raw)
        except record.RecordError as e:
            raise UsageError("--record: %s: give the hex `alabama core token` prints after 'record '" % e) from None
    else:
        from ..core import datadir, registry as reg
        args.data = datadir.resolve(args.data)   # a typo must not mint a token under a brand-new core key
        mint_ttl = DEFAULT_TTL_S if args.ttl is None else args.ttl
        if not 0 < mint_ttl <= reg.MAX_TTL_S:
            raise UsageError("--ttl is 1..%d seconds, got %d" % (reg.MAX_TTL_S, mint_ttl))
        # a placeholder of the real token's length: the size checks below see the record as it will be
        rec = record.build(lan_address(), CORE_PORT, reg.handed_out_key(args.data), "x" * reg.TOKEN_CHARS,
                           int(now()) + mint_ttl)
    if args.core_host is not None:
        rec.core_host = args.core_host
    if args.core_port is not None:
        if not 0 < args.core_port < 65536:
            raise UsageError("the core port is 1..65535, got %d" % args.core_port)
        rec.core_port = args.core_port
    if mint_ttl is not None:        # a token of this core: the port it listens on, never another program's
        from ..core.reach import record_port
        rec.core_port = record_port(args.data, rec.core_host, args.core_port,
                                    getattr(args, "core_port_option", "--core-port"))
    if args.no_key:
        rec.core_key = b""
    _wifi(args, rec, ask)
    if release_key is not None:
        rec.release_key = release_key
    if not rec.core_host or not rec.core_port:
        raise UsageError("the record has no core address: pass --host H and --port P")
    data = record.encode(rec)                    # refuses a bad field before anything is minted
    if mint_ttl is not None:
        from ..core import registry as reg
        token, expires = reg.Registry(args.data).mint_token(mint_ttl)
        rec.pairing_token, rec.token_expires = token, int(expires)
        data = record.encode(rec)
        out("token %s expires %s (in %d s)" % (token, _when(expires), mint_ttl))
    elif rec.pairing_token and rec.token_expires and rec.token_expires <= now():
        out("warning: the record's pairing token expired at %s: the core will not pair the board with it "
            "(mint a new one: --data DIR)" % _when(rec.token_expires))
    out("record %s (%d bytes): core %s:%d, %s, %s%s%s" % (
        record.shown(data.hex(), rec, getattr(args, "show_secrets", False)), len(data), rec.core_host, rec.core_port,
        "core key %s... (IK)" % rec.core_key[:4].hex() if rec.core_key else "no core key (XX)",
        "pairing token" if rec.pairing_token else "no token", ", Wi-Fi %s%s" % (
            rec.wifi_ssid, " (its passphrase is in this record: %s)" % record.SHOW_SECRETS
            if rec.wifi_passphrase and getattr(args, "show_secrets", False) else "") if rec.wifi_ssid else "",
        ", release key %s... pinned" % rec.release_key[:4].hex() if rec.release_key else ""))
    return data, rec


def _wifi(args, rec, ask):
    """Apply --wifi-ssid / --wifi-passphrase, asking for the passphrase without echo when only the SSID is
    given (empty answer: an open network). Checks what a board's Wi-Fi would refuse."""
    ssid = getattr(args, "wifi_ssid", None)
    passphrase = getattr(args, "wifi_passphrase", None)
    if ssid is not None:
        if record.ssid_problem(ssid):
            raise UsageError(record.ssid_problem(ssid))
        rec.wifi_ssid = ssid
        if passphrase is None:
            passphrase = (ask or _ask_passphrase)("Wi-Fi passphrase for %s (not shown; empty for an open "
                                                  "network): " % ssid)
    elif passphrase is not None and not rec.wifi_ssid:
        raise UsageError("--wifi-passphrase needs --wifi-ssid NAME (the network it opens)")
    if passphrase is not None:
        problem = record.wpa_problem(passphrase)
        if problem:
            raise UsageError(problem)
        rec.wifi_passphrase = passphrase


def _ask_passphrase(prompt):
    """At a terminal: getpass (no echo). Piped (`echo "$PASS" | alabama provision ...`): one line of stdin,
    without getpass's "can not control echo" warning."""
    import getpass
    try:
        if sys.stdin is not None and sys.stdin.isatty():
            return getpass.getpass(prompt)
        line = sys.stdin.readline() if sys.stdin is not None else ""
        if not line:
            raise EOFError
        return line.rstrip("\r\n")
    except (EOFError, KeyboardInterrupt):
        raise UsageError("no Wi-Fi passphrase given: pass --wifi-passphrase P, or type it at the prompt") from None


def cmd_qr(args):
    from . import qr, uri
    qr.segno()                                   # checked before a token is minted, like the PNG's folder
    if args.png:
        qr.check_writable(args.png)
    data, rec = build_record(args)
    text = uri.to_uri(data)
    print("uri %s" % record.shown(text, rec, args.show_secrets))
    symbol = qr.make(text)
    if not args.no_terminal:
        qr.terminal(symbol, sys.stdout, compact=not args.ansi, plain=args.plain)
    print("QR version %s (%dx%d modules)" % (symbol.designator, symbol.symbol_size(border=0)[0],
                                               symbol.symbol_size(border=0)[1]))
    if args.png:
        print("wrote %s" % qr.save_png(symbol, args.png, caption=qr.caption(rec, _when)))
    return 0


def cmd_sound(args):
    from . import sound
    if not args.wav and not args.play:
        raise UsageError("say where the sound goes: --wav FILE (then play it near the board) or --play")
    if not 0 < args.volume <= 100:
        raise UsageError("--volume is 1..100 (ggwave's volume), got %d" % args.volume)
    sound.check_ready(play=args.play)            # ggwave and a player: before a token is minted
    if args.wav:                                 # checked, not opened: a refused record leaves a file there as it was
        from ..outfile import problem
        why = problem(args.wav)
        if why:
            raise UsageError("cannot write %s: %s: give --wav a file in a folder you can write" % (args.wav, why))
    data, _ = build_record(args)
    wav = sound.wav_bytes(data, rate=args.rate, volume=args.volume)
    secs = sound.record_s(data)
    n = len(sound.parts.split(data))
    what = "%.1f s of ggwave [DT] Fastest%s" % (secs, ", %d parts" % n if n > 1 else "")
    if args.wav:
        try:
            with open(args.wav, "wb") as f:
                f.write(wav)
        except OSError as e:
            raise UsageError("cannot write %s: %s: give --wav a file in a folder you can write" % (
                args.wav, e.strerror or e)) from None
        print("wrote %s (%d Hz, %s): play it within a metre of the board's microphone while its LED shows "
              "listening mode" % (args.wav, args.rate, what))
    if args.play:
        print("playing %s: hold the speaker near the board's microphone" % what)
        player = sound.play(wav)
        print("played with %s" % player)
    if n > 1:
        print("a board that shows the \"part missing\" LED after this has not heard every part: play the same "
              "sound again (a part it already has is ignored)")
    return 0


def cmd_serial(args):
    from ..board import mpremote
    from . import serial
    # the port first: a missing board costs no token; opened to ask whether it is a terminal (/dev/null is not),
    # as the provisioning right after opens it anyway
    port = mpremote.resolve_port(args.port, probe=True)
    mpremote.check_free(port)                    # another program holds it: said before a token is minted
    data, rec = build_record(args)
    serial.provision(port, data, rec.core_key, reset=not args.no_reset, factory_reset=args.factory_reset)
    return 0
