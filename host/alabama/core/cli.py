"""`alabama core serve|key|token|devices|approve|invoke|setting|request-capture|say|show`: the reference core's CLI.

Responsible for argument parsing and printing only; the work is in ``server`` and ``registry``.
Commands that act on a live session (invoke, setting, request-capture, say, show) talk to the running
server through its loopback control endpoint (DIR/control.json, mode 0600).
"""
import asyncio
import json
import logging
import os
import signal
import time
import sys

from .. import CORE_PORT
from ..errors import UsageError
from .. import usage
from ..local import lan_address, local_time
from . import BRAINS
from . import datadir
from . import registry as reg
from ..speech import wakeword
from ..speech.wakeword import DEFAULT_WORD as DEFAULT_WAKE_WORD


def register(sub):
    p = sub.add_parser("core", help="the reference core: serve satellites, pair them, drive them")
    csub = p.add_subparsers(dest="core_command", metavar="ACTION")

    def data(q):
        q.add_argument("--data", metavar="DIR", help=datadir.data_help())

    s = csub.add_parser("serve", help="run the core (Ctrl-C stops it)")
    s.add_argument("--listen", default="0.0.0.0:%d" % CORE_PORT, help="HOST:PORT to listen on (default %(default)s)")
    data(s)
    s.add_argument("--closed", action="store_true", help="closed mode: reject devices not in the registry (§7.3)")
    s.add_argument("--min-wire-version", type=usage.positive(int, "a wire version"), default=1, help="lowest Hello.wire_version admitted (§13)")
    s.add_argument("--brain", default="echo", choices=BRAINS,
                   help="what answers a voice turn: echo, espeak, or speech (pocketsphinx + intents; docs/core.md)")
    s.add_argument("--stt", default="embedded", type=_stt_flag,
                   help="speech brain's recogniser: embedded (pocketsphinx), whisper (faster-whisper tiny.en: "
                        "pip install 'alabama-satellite[whisper]'; whisper:DIR your own CTranslate2 model) or "
                        "wyoming://HOST:PORT (docs/speech.md)")
    s.add_argument("--tts", default="embedded", type=_engine_flag,
                   help="speech brain's voice: embedded (espeak-ng) or wyoming://HOST:PORT")
    s.add_argument("--wake-word", default=None, metavar="MODEL",
                   help="wake-word model on ambient captures: alexa (default: the fewest false wakes measured), "
                        "okay_nabu, hey_jarvis, hey_mycroft or FILE.json (microWakeWord), open:NAME or FILE.tflite "
                        "(openWakeWord); docs/speech.md")
    s.add_argument("--wake-phrase", default=None, metavar="TEXT",
                   help="a custom phrase instead of a model, e.g. \"hey alabama\": the pocketsphinx keyphrase "
                        "spotter, weaker (hundreds of false wakes an hour measured; docs/speech.md); \"\": no "
                        "wake word at all")
    s.add_argument("--wake-threshold", type=usage.positive(float, "a threshold"), default=None,
                   help="with --wake-phrase: pocketsphinx keyphrase threshold (lower: more hits); default 1e-28 "
                        "(docs/speech.md)")
    s.add_argument("--wake-min-ms", type=usage.non_negative(int, "milliseconds", "off"), default=None, metavar="MS",
                   help="with --wake-phrase, second stage: a hit whose phrase segment is shorter than MS is "
                        "dropped (0: off); default "
                        "450 (docs/speech.md)")
    s.add_argument("--ping-interval", type=usage.non_negative(), default=15.0, help="seconds between core Pings (0: none)")
    s.add_argument("--workers", type=usage.positive(int, "worker processes"), default=1, help="worker processes on the one port (each device is served by "
                   "one of them; docs/core.md); default %(default)s")
    s.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"),
                   help="event loop: uvloop (pip install uvloop) spends less CPU per read; default %(default)s")
    s.set_defaults(func=cmd_serve)

    k = csub.add_parser("key", help="print the core's static public key (64 hex chars)")
    data(k)
    k.set_defaults(func=cmd_key)

    t = csub.add_parser("token", help="mint a pairing token: prints the token, then the provisioning record")
    data(t)
    t.add_argument("--ttl", type=usage.between(int, 1, reg.MAX_TTL_S, "seconds"), default=600,
                   help="seconds the token stays valid (default %(default)s, at most a week)")
    t.add_argument("--host", default=None, help="core address the record carries (default: this machine's LAN address)")
    t.add_argument("--port", type=usage.tcp_port(), default=None, help="the core's TCP port the record carries "
                   "(default: the port the running core of --data listens on, else %d); a port another program "
                   "holds on this machine is refused" % CORE_PORT)
    t.add_argument("--no-key", action="store_true", help="leave the core key out of the record (XX + token path)")
    t.add_argument("--wifi-ssid", default="")
    t.add_argument("--wifi-passphrase", default="")
    t.add_argument("--show-secrets", action="store_true", help="print the record even when it carries the Wi-Fi "
                   "passphrase: the hex holds it in clear (default: not printed)")
    t.set_defaults(func=cmd_token)

    d = csub.add_parser("devices", help="list devices: fingerprint, display name, trust, last seen")
    data(d)
    d.add_argument("--json", action="store_true")
    d.add_argument("--health", action="store_true",
                   help="also ask each connected device for its health (device.info, through the running core)")
    d.set_defaults(func=cmd_devices)

    a = csub.add_parser("approve", help="trust a guest (sends Paired on its live session) or pre-register a key")
    data(a)
    a.add_argument("device", nargs="?", help="fingerprint (or a unique prefix)")
    a.add_argument("--pubkey", help="pre-provisioned path: register this 64-hex device key as paired")
    a.set_defaults(func=cmd_approve)

    i = csub.add_parser("invoke", help="invoke a tool on a connected satellite and print the result")
    data(i)
    i.add_argument("device")
    i.add_argument("tool")
    i.add_argument("arguments", nargs="?", default="{}", help="JSON object of arguments")
    i.add_argument("--timeout", type=usage.positive(), default=10.0)
    i.set_defaults(func=cmd_invoke)

    w = csub.add_parser("setting", help="SettingsWrite a declared setting and print the SettingState")
    data(w)
    w.add_argument("device")
    w.add_argument("key")
    w.add_argument("value", help="the new value as you would say it: 80, true/false, or the text of a string or "
                   "enum setting (a SettingValue's JSON object such as '{\"intValue\": \"80\"}' also works)")
    w.set_defaults(func=cmd_setting)

    r = csub.add_parser("request-capture", help="RequestCapture on a connected satellite")
    data(r)
    r.add_argument("device")
    r.add_argument("ref", help="correlation_ref token")
    r.set_defaults(func=cmd_request_capture)

    y = csub.add_parser("say", help="stream text to a satellite's TEXT_DISPLAY (TextRenderOpen)")
    data(y)
    y.add_argument("device")
    y.add_argument("text")
    y.set_defaults(func=cmd_say)

    v = csub.add_parser("show", help="show an image file on a satellite's IMAGE_DISPLAY (fitted to it, R10.5-a)")
    data(v)
    v.add_argument("device")
    v.add_argument("file", help="an image file (JPEG, PNG, WebP, GIF, BMP, ...)")
    v.add_argument("--mime", default="", help="its MIME type (default: from the file name)")
    v.set_defaults(func=cmd_show)


def _stt_flag(value):
    """``--stt``: the engine flags, and the embedded faster-whisper engine (``whisper``, ``whisper:DIR``)."""
    if value == "whisper" or value.startswith("whisper:"):
        from ..speech import engines
        return engines.flag_type(value)
    return _engine_flag(value)


def _engine_flag(value):
    from .. import extras
    if value == "embedded":
        return value
    if value == "whisper" or value.startswith("whisper:"):
        import argparse
        raise argparse.ArgumentTypeError("whisper is a recogniser (--stt whisper), not a voice: give embedded or "
                                         "wyoming://HOST:PORT")
    if not extras.have("wyoming"):
        import argparse
        raise argparse.ArgumentTypeError("a wyoming:// engine needs the wyoming package: pip install "
                                         "'alabama-satellite[speech]'")
    from ..speech import engines      # imported when the flag is given: the wyoming package loads then
    return engines.flag_type(value)


def _listen(spec):
    host, sep, port = spec.rpartition(":")
    if sep and port.isdigit() and int(port) > 65535:
        raise UsageError("--listen %s: %s is not a TCP port: give 1..65535 (0: a free one), e.g. 0.0.0.0:%d"
                         % (spec, port, CORE_PORT))
    if not sep or not port.isdigit():
        raise UsageError("--listen wants HOST:PORT, e.g. 0.0.0.0:%d (got %r)" % (CORE_PORT, spec))
    return host or "0.0.0.0", int(port)


def _wake_choice(args):
    """(wake_word, wake_phrase) for the core: ``--wake-phrase`` (a custom phrase, or "" for none) or
    ``--wake-word``, never both; neither: the default model (DEFAULT_WAKE_WORD). An empty or blank --wake-word is
    refused with the names it takes (it fell back to the default silently)."""
    if args.wake_word is not None and not args.wake_word.strip():
        wakeword.parse_word(args.wake_word)          # WakeNameError: "--wake-word is empty: give ..." (status 2)
    if args.wake_phrase is not None and args.wake_word:
        raise UsageError("give --wake-word MODEL or --wake-phrase TEXT, not both (a phrase is spotted by the "
                         "keyphrase spotter, a word by its model)")
    if args.wake_phrase is not None:
        return None, args.wake_phrase
    if args.wake_threshold is not None or args.wake_min_ms is not None:
        raise UsageError("--wake-threshold and --wake-min-ms tune the keyphrase spotter: give them with "
                         "--wake-phrase TEXT (a model keeps its published cutoff)")
    return args.wake_word or DEFAULT_WAKE_WORD, None


def _wake_at_start(word, phrase):
    """The wake choice checked once, before any worker starts -> (word, phrase) every server is given. A missing
    or damaged model, a phrase word not in the dictionary: WakeError (one line, exit 1). The model's engine
    package absent: said here once, in one line with its install command, and the servers get the keyphrase
    spotter's phrase instead; without pocketsphinx for that, one line and no spotting ("")."""
    from ..speech import SpeechUnavailable
    from .server import wake_fallback, wake_off
    try:
        if word:
            try:
                wakeword.choose(word)
                return word, None
            except wakeword.WakeUnavailable as e:
                word, phrase = None, wake_fallback(e, phrase)
        if phrase:
            wakeword.choose(phrase=phrase)
    except SpeechUnavailable as e:
        wake_off(e)
        return None, ""
    return word, phrase


def _stt_at_start(brain, stt):
    """``--stt whisper[:DIR]`` with the speech brain: its model loaded now (once per process; a worker loads its
    own). A damaged model directory: EngineError (one line, exit 1). faster-whisper or the packaged model not
    installed: one line with the install command, and the core hears with the embedded pocketsphinx instead."""
    from ..speech import SpeechUnavailable, engines
    if brain != "speech" or not engines.is_whisper(stt):
        return stt
    from ..speech import whisper
    try:
        whisper.load(stt)
    except SpeechUnavailable as e:
        logging.getLogger("alabama.core").warning("%s; falling back to --stt embedded (pocketsphinx)", e)
        return engines.EMBEDDED
    logging.getLogger("alabama.core").info("speech recogniser: faster-whisper, model %s", whisper.model_dir(stt))
    return stt


#: The start-up probe of a wyoming:// engine: connect, then Describe, each bounded (seconds).
PROBE_CONNECT_S, PROBE_ANSWER_S = 2.0, 3.0


def _remote_at_start(brain, option, flag):
    """With the speech brain, a ``wyoming://`` engine (OPTION is --stt or --tts) asked once at start (connect +
    Describe, short timeouts): one that cannot be reached is said in one line, and the core serves anyway and tries
    the server again at every turn (one started after the core is used from its first answer; until then each turn
    ends with an Error to the board), as Home Assistant retries a Wyoming server that is down. -> True if it
    answered, False if not, None where no Wyoming engine is used."""
    from ..speech import engines
    log = logging.getLogger("alabama.core")
    if flag == engines.EMBEDDED:
        return None
    if brain != "speech":                # given, and nothing would use it: said, not ignored
        log.warning("%s %s is not used: only the speech brain hears and speaks through --stt/--tts, and the %s "
                    "brain answers (add --brain speech)", option, flag, brain)
        return None
    if engines.is_whisper(flag):
        return None
    from ..speech import wyoming_io
    kind = wyoming_io.WyomingSTT if option == "--stt" else wyoming_io.WyomingTTS
    client = kind(flag, connect_timeout=PROBE_CONNECT_S, read_timeout=PROBE_ANSWER_S)
    try:
        info = client.describe()
    except engines.EngineError as e:       # what failed, without the client's hint: the advice here is the core's
        log.warning("%s: the core serves anyway and asks it again at every turn (each turn ends with an error until "
                    "it answers): start it, or use %s embedded", e.what, option)
        return False
    offers, what = (info.asr, "speech-to-text") if option == "--stt" else (info.tts, "text-to-speech")
    if not offers:                       # e.g. --stt pointed at a piper (TTS) server: every turn would fail on it
        log.warning("%s %s answers but offers no %s (its Describe lists none): give %s the port of a Wyoming %s "
                    "server, or %s embedded", option, flag, what, option, what, option)
        return False
    log.info("%s %s answers", option, flag)
    return True


def _speech_kw(args):
    word, phrase = _wake_choice(args)
    return {"stt": args.stt, "tts": args.tts, "wake_phrase": phrase, "wake_threshold": args.wake_threshold,
            "wake_min_ms": args.wake_min_ms, "wake_word": word}


def max_workers():
    """The most worker processes core serve starts: 4 per CPU core (999, a slip for a port, forked 999 cores)."""
    return 4 * (os.cpu_count() or 1)


def cmd_serve(args):
    from .server import CoreServer
    host, port = _listen(args.listen)
    if args.workers < 1:
        raise UsageError("--workers wants 1 or more worker processes")
    if args.workers > max_workers():
        raise UsageError("--workers %d: give at most %d on this machine (4 per CPU core, %d cores): more worker "
                         "processes serve no more boards, and each is a whole core process (docs/core.md)"
                         % (args.workers, max_workers(), os.cpu_count() or 1))
    wake = _wake_choice(args)                # the options' own mistakes before the directory is made
    args.data = datadir.resolve(args.data, create=True)
    logging.getLogger("alabama.core").setLevel(min(logging.getLogger().getEffectiveLevel(), logging.INFO))
    args.wake_word, args.wake_phrase = _wake_at_start(*wake)
    args.stt = _stt_at_start(args.brain, args.stt)
    _remote_at_start(args.brain, "--stt", args.stt)
    _remote_at_start(args.brain, "--tts", args.tts)
    if args.workers > 1:
        from . import workers

        def ready(port, key):
            print("alabama core: key %s" % key)
            print("alabama core: listening on %s:%d%s (data %s, %d workers)" % (
                host, port, " [closed]" if args.closed else "", args.data, args.workers), flush=True)
        status = workers.serve(args.data, args.workers, host=host, port=port, ready=ready, closed=args.closed,
                               min_wire_version=args.min_wire_version, brain=args.brain,
                               ping_interval=args.ping_interval, loop=args.loop, **_speech_kw(args))
        print("alabama core: shutting down", flush=True)
        return status

    async def main():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):     # before the "listening" line a supervisor may act on
            loop.add_signal_handler(sig, stop.set)
        srv = CoreServer(args.data, host=host, port=port, closed=args.closed, min_wire_version=args.min_wire_version,
                         brain=args.brain, ping_interval=args.ping_interval, **_speech_kw(args))
        await srv.start()
        print("alabama core: key %s" % srv.public_key_hex)
        print("alabama core: listening on %s:%d%s (data %s)" % (host, srv.port, " [closed]" if args.closed else "",
                                                               args.data), flush=True)
        await stop.wait()
        print("alabama core: shutting down", flush=True)
        await srv.stop()
    # admissions and session ends at INFO even without -v; -vv adds one line per frame (DEBUG)
    from .workers import run_loop
    run_loop(main, args.loop)
    return 0


def cmd_key(args):
    # the default directory is made on first use; a --data that does not exist is a typo, not a new identity
    args.data = datadir.resolve(args.data, create=args.data is None)
    print(reg.handed_out_key(args.data).hex())
    return 0


def cmd_token(args):
    from ..provision import record
    if args.wifi_passphrase and not args.wifi_ssid:
        raise UsageError("--wifi-passphrase needs --wifi-ssid NAME (the network it opens)")
    problem = ((record.ssid_problem(args.wifi_ssid) if args.wifi_ssid else None)
               or record.wpa_problem(args.wifi_passphrase)
               or (record.host_problem(args.host) if args.host is not None else None))
    if problem:
        raise UsageError(problem)
    from .reach import record_port
    host = args.host or lan_address()
    # as `core key`: a --data with no core state in it is a typo, not a new identity (its token would be signed by a
    # key no core has; `core serve --data DIR` makes one); the default directory is made on first use, after the port
    # check (a refused record leaves nothing behind)
    where = datadir.resolve(args.data) if args.data else datadir.default_data_dir()
    args.port = record_port(where, host, args.port)
    args.data = where if args.data else datadir.resolve(None, create=True)
    key = None if args.no_key else reg.handed_out_key(args.data)
    try:            # the record checked with a placeholder of the token's length first: a refused one costs no token
        record.encode(record.build(host, args.port, key, "x" * reg.TOKEN_CHARS, int(time.time()) + args.ttl,
                                   args.wifi_ssid, args.wifi_passphrase))
    except record.RecordError as e:
        raise UsageError("the record cannot carry this: %s (no token was minted)" % e) from None
    token, expires = reg.Registry(args.data).mint_token(args.ttl)
    data = record.encode(record.build(host, args.port, key, token, expires, args.wifi_ssid, args.wifi_passphrase))
    print(token)
    rec = record.decode(data)
    print("record %s" % record.shown(data.hex(), rec, args.show_secrets))
    if rec.wifi_passphrase and args.show_secrets:
        print("the record above carries the Wi-Fi passphrase in clear (%s): keep it out of logs and bug reports"
              % record.SHOW_SECRETS)
    print("expires %s (in %d s)" % (local_time(expires), args.ttl))
    return 0


def cmd_devices(args):
    args.data = datadir.resolve(args.data)
    devs = reg.Registry(args.data).devices()
    health = _health(args) if args.health else {}
    if args.json:
        print(json.dumps([dict(d.as_dict(), **({"health": health.get(d.device_id)} if args.health else {}))
                          for d in devs], indent=1))
        return 0
    print("%-32s  %-20s  %-6s  %s" % ("FINGERPRINT", "NAME", "TRUST", "LAST SEEN"))
    for d in devs:
        seen = local_time(d.last_seen) if d.last_seen else "-"
        print("%-32s  %-20s  %-6s  %s" % (d.device_id, d.display_name[:20], d.trust, seen))
    if args.health:
        print()
        print(health_table(devs, health))
    return 0


HEALTH_COLUMNS = ("DEVICE", "FIRMWARE", "DIGEST", "UPTIME", "HEAP FREE/MIN", "LARGEST FREE", "RSSI", "RESET", "CRASHES", "RECONN",
                  "DROPPED", "OTA")


def health_row(device_id, h):
    """One table row of a device's health (device.info or device.health event metadata; None: not connected)."""
    if not h:
        return (device_id[:16], "not connected") + ("",) * (len(HEALTH_COLUMNS) - 2)
    ota = h.get("ota")
    ota = ota.get("state", "") if isinstance(ota, dict) else (ota or "")
    up = h.get("uptime_ms")
    free, low, largest = h.get("heap_free"), h.get("heap_min"), h.get("heap_largest_free")
    return (device_id[:16], str(h.get("firmware", "?")), (h.get("firmware_digest") or h.get("digest") or "-")[:12],
            "%.0f s" % (up / 1000.0) if up is not None else "-",
            "%s/%s" % ("-" if free is None else "%.1fk" % (free / 1024.0), "-" if low is None else "%.1fk" % (low / 1024.0)),
            "-" if largest is None else "%.1fk" % (largest / 1024.0),     # the biggest block one allocation can get
            "-" if h.get("rssi") is None else "%d dBm" % h["rssi"], str(h.get("reset_reason", "-")),
            str(h.get("crash_count", "-")), str(h.get("reconnect_count", "-")), str(h.get("frames_dropped", "-")),
            ota + (" (event)" if h.get("source") == "event" else ""))


def health_table(devs, health):
    rows = [HEALTH_COLUMNS] + [health_row(d.device_id, health.get(d.device_id)) for d in devs]
    w = [max(len(r[i]) for r in rows) for i in range(len(HEALTH_COLUMNS))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows)


def _health(args):
    """{device_id: health} of the connected devices; {} (with a note) when no core runs on args.data."""
    from .errors import CoreError
    try:
        return _control(args, {"op": "health", "timeout": 5.0})
    except CoreError as e:
        print("health: %s" % e, file=sys.stderr)
        return {}


def cmd_approve(args):
    args.data = datadir.resolve(args.data, create=bool(args.pubkey))   # pre-registering a key may come first
    r = reg.Registry(args.data)
    if args.pubkey:
        try:
            key = bytes.fromhex(args.pubkey)
        except ValueError:
            key = b""
        if len(key) != 32:
            raise UsageError("--pubkey wants the device's 32-byte key as 64 hex characters")
        print(r.preconfigure(key))
        return 0
    if not args.device:
        raise UsageError("give a device fingerprint (see `alabama core devices`) or --pubkey")
    dev = r.find(args.device)
    r.set_trust(dev.device_id, reg.PAIRED)
    print("%s approved; a running core sends Paired on its live session" % dev.device_id)
    return 0


def _control(args, req):
    from .server import control_call
    args.data = datadir.resolve(args.data)
    return asyncio.run(control_call(args.data, req, timeout=getattr(args, "timeout", 10.0) + 5))


def cmd_invoke(args):
    try:
        ok = isinstance(json.loads(args.arguments), dict)
    except ValueError:
        ok = False
    if not ok:
        raise UsageError("arguments must be a JSON object, e.g. '{\"level\": 3}' (got %s)" % args.arguments)
    res = _control(args, {"op": "invoke", "device": args.device, "name": args.tool, "arguments": args.arguments,
                          "timeout": args.timeout})
    print(json.dumps(res, indent=1))
    return 0


def cmd_setting(args):
    value = args.value
    if value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise UsageError("%s is not a JSON object (%s): give the value itself, e.g. `alabama core setting %s %s 80`"
                             % (args.value, e, args.device, args.key)) from None
    res = _control(args, {"op": "setting", "device": args.device, "key": args.key, "value": value})
    print(json.dumps(res, indent=1))
    return 0


def cmd_request_capture(args):
    print(json.dumps(_control(args, {"op": "request_capture", "device": args.device, "ref": args.ref}), indent=1))
    return 0


def cmd_say(args):
    print(json.dumps(_control(args, {"op": "render_text", "device": args.device, "text": args.text})))
    return 0


def cmd_show(args):
    import mimetypes
    import os
    path = os.path.abspath(args.file)
    if not os.path.isfile(path):
        raise UsageError("no such image file: %s" % args.file)
    mime = args.mime or mimetypes.guess_type(path)[0] or ""
    if not mime.startswith("image/"):
        raise UsageError("cannot tell the image type of %s: pass --mime image/png (or image/jpeg, ...)" % args.file)
    print(json.dumps(_control(args, {"op": "show_image", "device": args.device, "path": path, "mime": mime})))
    return 0
