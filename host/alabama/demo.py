"""`alabama demo`: one voice exchange, reference core <-> virtual board, shown as a frame timeline.

Responsible for orchestration only: start the reference core in-process on 127.0.0.1, mint a pairing
token, provision a fresh virtual board (core address + key + token), start it, push its button, play an
utterance into its microphone (espeak-ng when installed, else a synthesized signal), release, let the
core's brain answer (speech when pocketsphinx is installed: it prints what it heard; else echo), print the
frames in the style of the spec's §4 listings, write the reply WAV, and exit 0 only when the exchange
completed with an empty conformance report. ``--ambient`` (``make demo-ambient``): no button — the board
streams ambiently from connect (its stored setting capture_mode = ambient), the core spots its default wake word
on that stream (the microWakeWord ``alexa`` model: "Alexa, what time is it"), or with ``--wake-phrase TEXT`` a
custom phrase with the keyphrase spotter ("hey alabama, what time is it").
``--wake`` (``make demo-wake``): the board wakes by itself — capture_mode wake, the okay_nabu model compiled onto
it by deploy, its own frontend and model listening to the mic; "okay nabu, what time is it" played into the mic
opens a WAKEWORD capture with the question only, and the core answers it.
``--say "turn off the light"``: the speech brain Invokes the virtual board's ``light.set`` (its simulated lamp);
the board's ``light off`` line is printed.
"""
import asyncio
import logging
import math
import pathlib
import shutil
import struct
import subprocess
import tempfile
import time

from .board import logwords as lw
from .errors import AlabamaError, UsageError

UTTERANCE = "What time is it?"     # a command the speech brain knows (alabama.speech.intents)
AMBIENT_WORDS = "Alexa,"       # the core's default wake word (speech.wakeword.DEFAULT_WORD), said in WAKE_VOICE
AMBIENT_UTTERANCE = UTTERANCE
WAKE_MODEL = "okay_nabu"
WAKE_WORDS = "Okay nabu,"       # spoken in WAKE_VOICE: okay_nabu hears espeak-ng's male voices, not its f2
WAKE_VOICE = "en-us"           # alexa, too, hears en-us and not the recogniser's en-us+f2 voice


def demo_brain():
    """``speech`` (hears, answers what it understood) when pocketsphinx and espeak-ng are here, else ``echo``."""
    import importlib.util
    return "speech" if importlib.util.find_spec("pocketsphinx") and shutil.which("espeak-ng") else "echo"


class HeardTap(logging.Handler):
    """The core's ``heard: "..." intent ...`` log lines (the speech brain's), for the demo to print."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        msg = record.getMessage()
        for word in ("heard: ", "wake phrase ", "wake word "):
            if word in msg:
                self.lines.append(msg[msg.index(word):])
                break


class _Forward(logging.Handler):
    """Passes on to the logger's parents only what they would have printed before the demo raised its level."""

    def __init__(self, logger, level):
        super().__init__(level)
        self.parent = logger.parent

    def emit(self, record):
        if self.parent is not None:
            self.parent.handle(record)


class heard_tap:
    """``with heard_tap() as tap``: the pipeline's INFO lines reach ``tap.lines`` (the demo echoes them once) and
    not the root handler (``alabama -v``'s log): the demo lowers the pipeline logger to INFO, and a propagating
    logger would hand those records to the root's stderr handler too, so ``heard: "..."`` printed twice. Records
    the logger's parents would have printed anyway (WARNING, or INFO under ``-v``) are still passed on."""

    def __enter__(self):
        self.log = logging.getLogger("alabama.core.pipeline")
        self.saved = (self.log.level, self.log.propagate)
        self.tap = HeardTap()
        self.forward = _Forward(self.log, self.log.getEffectiveLevel())
        self.log.addHandler(self.tap)
        self.log.addHandler(self.forward)
        self.log.setLevel(logging.INFO)
        self.log.propagate = False
        return self.tap

    def __exit__(self, *exc):
        self.log.removeHandler(self.tap)
        self.log.removeHandler(self.forward)
        self.log.propagate = self.saved[1]
        self.log.setLevel(self.saved[0])
        return False


class DemoError(AlabamaError):
    pass


class FrameTap(logging.Handler):
    """Collects the core's per-frame debug log (alabama.core.frames) as timeline rows."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.rows = []
        self.t0 = time.monotonic()

    def emit(self, record):
        try:
            direction = record.msg.split()[1]
            _dev, op, id_, header, tail = record.args
        except (ValueError, TypeError, IndexError, AttributeError):
            return
        env = getattr(record, "envelope", None)
        detail = ""
        if env is not None and op and op != "stream_chunk":
            from .hil.timeline import summarize
            detail = summarize(getattr(env, op))
        self.rows.append((time.monotonic() - self.t0, direction, op, id_, header, tail, detail))


def timeline(rows, max_chunks=3):
    """Rows -> text lines like spec §4: 'Sat → Core  CaptureOpen  {id 1}' with chunk runs collapsed."""
    out = []
    seq = {}
    run = None          # (direction, id, count) of the chunk run being collapsed
    t0 = rows[0][0] if rows else 0.0      # the session's first frame (the Hello) is 0.000 s

    def flush_run():
        if run and run[2] > max_chunks:
            out.append("   ⋯        (%d more StreamChunk frames on id %d)" % (run[2] - max_chunks, run[1]))

    for t, d, op, id_, header, tail, detail in rows:
        t -= t0
        who = "Sat → Core " if d == "IN" else "Core → Sat "
        name = "".join(p.capitalize() for p in (op or "unknown").split("_"))
        if op == "stream_chunk":
            k = (d, id_)
            s = seq.get(k, 0)
            seq[k] = s + 1
            if run and run[:2] == (d, id_):
                run = (d, id_, run[2] + 1)
                if run[2] > max_chunks:
                    continue
            else:
                flush_run()
                run = (d, id_, 1)
            out.append("%7.3fs  %s %-16s {id %d, seq %d}  %d B header + %d B %s"
                       % (t, who, name, id_, s, header, tail, "audio" if d == "IN" else "tts"))
            continue
        flush_run()
        run = None
        body = "id %d" % id_ + (", " + detail if detail else "")
        out.append("%7.3fs  %s %-16s {%s}  %d B" % (t, who, name, body, header))
    flush_run()
    return out


def synth_utterance(seconds=1.6, rate=16000):
    """A speech-like signal: voiced syllables (a 140 Hz buzz through two formants) with pauses."""
    out = []
    n = int(seconds * rate)
    for i in range(n):
        t = i / rate
        syl = (t * 4.0) % 1.0
        env = math.sin(math.pi * syl / 0.7) if syl < 0.7 else 0.0
        f0 = 140 + 20 * math.sin(2 * math.pi * 1.3 * t)
        v = sum(math.sin(2 * math.pi * k * f0 * t) / k for k in range(1, 12))
        v *= 0.6 + 0.4 * math.sin(2 * math.pi * 700 * t)
        out.append(int(max(-32767, min(32767, 6000 * env * v))))
    return out


def make_utterance(path, text=UTTERANCE):
    """Write a 16 kHz mono WAV: espeak-ng's voice when installed, else a synthesized signal."""
    from alabama import audio
    from .speech import audio as speech_audio      # the voice and pace pocketsphinx hears best (docs/speech.md)
    source = "synthesized signal (install espeak-ng for a spoken utterance)"
    pcm = None
    try:
        raw = speech_audio.espeak_wav(text, timeout=30)
        rate, ch, data = audio.parse(raw)
        pcm = audio.resample(data, rate, ch, 16000, 1)
        source = "espeak-ng: %r" % text
    except (speech_audio.ToolMissing, subprocess.SubprocessError, OSError, ValueError):
        pcm = None
    if pcm is None:
        s = synth_utterance()
        pcm = struct.pack("<%dh" % len(s), *s)
    audio.write(path, pcm, 16000)
    return len(pcm) / 32000.0, source


def wake_words(model):
    """What to say for a wake model: okay_nabu -> "Okay nabu,"; a .tflite of your own -> its name the same way."""
    return pathlib.Path(model).stem.replace("_", " ").capitalize() + ","


def make_wake_utterance(path, text=UTTERANCE, words=WAKE_WORDS, pause_ms=300):
    """The wake words (WAKE_VOICE), a pause, then the command (the voice pocketsphinx hears best): one WAV."""
    from alabama import audio
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise DemoError("the wake demo speaks the wake word: it needs espeak-ng (apt-get install espeak-ng)")
    from .speech.audio import SPEED, VOICE
    pcm = b""
    for voice, said in ((WAKE_VOICE, words), (VOICE, text)):
        raw = subprocess.run([exe, "-v", voice, "-s", str(SPEED), "--stdout", said], capture_output=True,
                             timeout=30, check=True).stdout
        rate, ch, data = audio.parse(raw)
        pcm += audio.resample(data, rate, ch, 16000, 1) + bytes(32 * pause_ms)
    audio.write(path, pcm, 16000)
    return len(pcm) / 32000.0, "espeak-ng: %r (%s) + %r (%s)" % (words, WAKE_VOICE, text, VOICE)


def store_ambient_setting(flash):
    """The board's stored settings say capture_mode = ambient: it opens an ambient capture at connect
    (firmware satellite/device.py, Satellite.started) and resumes it after every turn."""
    import json
    from alabama.provision import record as rc
    d = pathlib.Path(flash) / rc.DATA_DIR
    d.mkdir(parents=True, exist_ok=True)
    (d / rc.SETTINGS).write_text(json.dumps({"capture_mode": "ambient"}))


async def run_demo(workdir, out_wav, board="sim", text=UTTERANCE, echo=print, verbose=False, wake_phrase=None,
                   wake=None, ambient=False):
    """One exchange; with ``ambient`` hands-free (the board ambient, the core spotting its default wake word, or
    ``wake_phrase`` with the keyphrase spotter: the utterance then starts with the phrase); with ``wake`` (a model
    name) hands-free on the board itself (it detects the word and opens a WAKEWORD capture)."""
    from alabama.board import boards, sim
    from alabama.speech.wakeword import DEFAULT_WORD
    ambient = ambient or bool(wake_phrase)
    ambient_word = DEFAULT_WORD if ambient and not wake_phrase else None
    if ambient_word:
        import importlib.util
        if importlib.util.find_spec("pymicro_wakeword") is None:
            raise DemoError("the ambient demo's wake word %s is a microWakeWord model: pip install pymicro-wakeword "
                            "(or give --wake-phrase \"hey alabama\" for the keyphrase spotter)" % DEFAULT_WORD)
    if wake:
        from .wake.reference import BUILTIN
        if wake not in BUILTIN and not (wake.endswith(".tflite") and pathlib.Path(wake).is_file()):
            raise UsageError("--wake %s: give a model pymicro-wakeword ships (%s) or the path of your .tflite (its "
                             ".json beside it)" % (wake, ", ".join(BUILTIN)))
        import importlib.util
        if wake in BUILTIN and importlib.util.find_spec("pymicro_wakeword") is None:
            raise DemoError("--wake %s: pymicro-wakeword, which ships it, is not installed (it has no wheel for this "
                            "system): give --wake the path of a .tflite with its .json beside it" % wake)
        board = boards.with_wake(boards.load(board) if isinstance(board, str) else board, wake)
    from alabama.core.server import CoreServer
    work = pathlib.Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    tap = FrameTap()
    flog = logging.getLogger("alabama.core.frames")
    old_level = flog.level
    flog.setLevel(logging.DEBUG)
    flog.addHandler(tap)
    flog.propagate = verbose
    brain = demo_brain()
    if ambient and brain != "speech":
        raise DemoError("the ambient demo hears a wake word: it needs pocketsphinx (pip install "
                        "'alabama-satellite[speech]') "
                        "and espeak-ng (apt-get install espeak-ng)")
    hearing = heard_tap()
    heard = hearing.__enter__()
    core = CoreServer(work / "core", host="127.0.0.1", port=0, brain=brain, control=False, wake_phrase=wake_phrase,
                      wake_word=ambient_word)
    await core.start()
    vb = None
    loop = asyncio.get_running_loop()
    try:
        echo("core      : reference core on 127.0.0.1:%d, static key %s…, brain %s" % (
            core.port, core.public_key_hex[:16], core.brain.name))
        token, expires = core.mint_token(600)
        flash = work / "flash"
        if flash.exists():
            shutil.rmtree(flash)
        sim.provision(flash, "127.0.0.1", core.port, core.public_key, token, int(expires))
        echo("provision : fresh virtual board at %s (core address + key + pairing token)" % flash)
        if ambient:
            store_ambient_setting(flash)
            echo("settings  : capture_mode = ambient (streams from connect); the core listens for %s" % (
                repr(wake_phrase) + " (keyphrase spotter)" if wake_phrase else
                "%r (microWakeWord model)" % ambient_word))
        utt = work / "utterance.wav"
        if wake:
            seconds, source = make_wake_utterance(utt, text, wake_words(wake))
            echo("settings  : capture_mode = wake (board file), wake_word = %s: the board listens by itself" % wake)
        elif ambient_word:
            seconds, source = make_wake_utterance(utt, text, wake_words(ambient_word))
        else:
            seconds, source = make_utterance(utt, text)
        echo("utterance : %.2f s, %s" % (seconds, source))
        vb = sim.VirtualBoard(flash, board=board, speaker=work / "speaker.wav")
        vb.start()
        echo("board     : %s under micropython (heap %s), REPL on %s" % (vb.board.id, vb.heap_limit, vb.pty_path))
        await loop.run_in_executor(None, vb.wait_log, r"accepted", 30)
        echo("session   : %s" % vb.wait_log(lw.HANDSHAKE_DONE, 1).group(0))
        if wake:
            await loop.run_in_executor(None, vb.wait_log, lw.WAKE_LISTENING, 10)
            m = vb.mark()
            echo("mic       : %r" % source)
            vb.set_mic(utt)
            try:
                hit = await loop.run_in_executor(None, vb.wait_log, lw.WAKE_DETECTED, seconds + 5, m)
            except sim.SimError:
                raise DemoError("the board did not hear its wake word %s in %s" % (wake, source))
            cap = await loop.run_in_executor(None, vb.wait_log, lw.CAPTURE_OPENED_WAKE, 2, m)
            echo("board     : %s, capture %s opened (WAKEWORD), the question streams" % (hit.group(0), cap.group(1)))
        elif ambient:
            amb = await loop.run_in_executor(None, vb.wait_log, r"capture (\d+) opened \(ambient", 10)
            echo("board     : ambient capture %s streaming, no button" % amb.group(1))
            m = vb.mark()
            echo("mic       : %s" % (repr(text) if wake_phrase else source))
            vb.set_mic(utt)
        else:
            vb.set_mic(utt)
            m = vb.mark()
            echo("button    : press")
            await loop.run_in_executor(None, vb.press)
            await asyncio.sleep(seconds + 0.3)
            echo("button    : release")
            await loop.run_in_executor(None, vb.release)
        try:
            await loop.run_in_executor(None, vb.wait_log, r"capture \d+ done: Response", 30 + seconds, m)
        except sim.SimError as e:
            raise DemoError("the exchange did not complete%s: %s" % (
                " (was the wake word heard?)" if ambient else "", str(e).splitlines()[0]))
        played = await loop.run_in_executor(None, vb.wait_log, r"playback done \d+ frames (\d+)", 1, m)
        if ambient:
            again = await loop.run_in_executor(None, vb.wait_log, r"capture (\d+) opened \(ambient", 10, m)
            echo("board     : ambient streaming again on capture %s" % again.group(1))
        await asyncio.sleep(0.3)
        for line in heard.lines:
            echo("core      : " + line)
        for line in vb.lines()[m:]:
            if "sim: light " in line:     # the board's lamp, switched by the core's Invoke of light.set
                echo("board     : " + line[line.index("light "):] + " (light.set, Invoked by the core)")
        echo("")
        echo("frame timeline (as the core saw it):")
        for line in timeline(tap.rows):
            echo("  " + line)
        echo("")
        frames = int(played.group(1))
        try:                             # checked before the start (_writable_out); a disk that filled up since
            pathlib.Path(out_wav).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(work / "speaker.wav", out_wav)
        except OSError as e:
            raise DemoError("cannot write the reply to %s (%s): the exchange completed; give --out a path you can "
                            "write" % (out_wav, e.strerror or e)) from None
        echo("reply     : %d frames (%.2f s) played by the board -> %s" % (frames, frames / 16000.0, out_wav))
    finally:
        if vb is not None:
            vb.stop()
        await core.stop()
        flog.removeHandler(tap)
        hearing.__exit__(None, None, None)
        flog.setLevel(old_level)
        flog.propagate = True
    bad = [v.as_dict() for r in core.reports for v in r.violations]
    if bad:
        raise DemoError("the core's conformance report is not empty: %s" % bad[:3])
    echo("conformance: %d session(s), no violations" % len(core.reports))
    return 0


def register(sub):
    p = sub.add_parser("demo", help="reference core + virtual board + one voice exchange, as a frame timeline",
                       description="Start the reference core, provision and start a virtual board, push its button, "
                                   "speak into its microphone, and show the exchange frame by frame.")
    p.add_argument("--dir", metavar="DIR", help="work directory (default: a temporary one, removed after)")
    p.add_argument("--out", metavar="WAV", default=None, help="where the reply lands (default %s: the build "
                   "directory, never the one you stand in)" % default_out())
    p.add_argument("--say", metavar="TEXT", help="what espeak-ng says into the microphone (default %r; with "
                   "--ambient it follows %r, with --wake-phrase it starts with the phrase)" % (
                       UTTERANCE, AMBIENT_WORDS))
    from . import CHECKOUT                  # the make targets only where there is a Makefile
    p.add_argument("--ambient", action="store_true", help="hands-free: the board streams ambiently, the core "
                   "listens for its default wake word, alexa%s; needs pocketsphinx and espeak-ng"
                   % (" (make demo-ambient)" if CHECKOUT else ""))
    p.add_argument("--wake-phrase", default=None, metavar="TEXT", help="with --ambient: a custom phrase the core's "
                   "keyphrase spotter listens for instead (weaker), e.g. \"hey alabama\"")
    p.add_argument("--wake", nargs="?", const=WAKE_MODEL, metavar="MODEL", help="hands-free on the board: it "
                   "detects the wake word itself (default model %s%s); needs espeak-ng"
                   % (WAKE_MODEL, "; make demo-wake" if CHECKOUT else ""))
    p.add_argument("--board", default="sim", metavar="NAME", help="board file to simulate (default: sim)")
    p.set_defaults(func=cmd_demo)


def default_out():
    """The reply WAV's default place: the package's build directory (the checkout's build/, else the user cache)."""
    from . import BUILD
    return BUILD / "demo-reply.wav"


def _writable_out(path):
    """--out checked before anything starts: a WAV file whose directory exists or can be made."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise UsageError("--out %s is a directory: give a file name, e.g. %s" % (path, path / "demo-reply.wav"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError("--out %s: cannot make its directory (%s): give a path you can write"
                         % (path, e.strerror or e)) from None
    from .outfile import problem
    why = problem(path)                  # tried, not guessed: /proc or a read-only mount refuse even root
    if why:
        raise UsageError("--out %s: cannot write it (%s): give a path you can write" % (path, why))
    return path


def cmd_demo(args):
    out = _writable_out(args.out or default_out())
    from .board import boards
    boards.load(args.board, option="--board")    # a typo'd --board before the core starts and the board is provisioned
    if args.ambient and args.wake is not None:
        raise UsageError("--ambient and --wake are two hands-free demos: the core hears the wake word (--ambient) "
                         "or the board does (--wake); pick one")
    if args.say is not None and not args.say.strip():
        raise UsageError("--say is empty: give the words espeak-ng speaks into the microphone, e.g. \"what time "
                         "is it\" (or leave --say out)")
    if args.dir and pathlib.Path(args.dir).exists() and not pathlib.Path(args.dir).is_dir():
        raise UsageError("--dir %s is a file: give a directory for the demo's core and board (made if missing)"
                         % args.dir)
    tmp = None
    work = args.dir
    if not work:
        tmp = tempfile.mkdtemp(prefix="alabama-demo-")
        work = tmp
    try:
        if args.wake_phrase is not None and not args.ambient:
            raise UsageError("--wake-phrase is for the hands-free demo: add --ambient")
        if args.ambient and args.wake_phrase is not None and not args.wake_phrase.strip():
            raise UsageError("--wake-phrase is empty: give the phrase the core listens for, e.g. \"hey alabama\"")
        phrase = args.wake_phrase.strip() if args.ambient and args.wake_phrase else None
        text = args.say or (phrase.capitalize() + ", " + UTTERANCE[0].lower() + UTTERANCE[1:] if phrase else
                            AMBIENT_UTTERANCE if args.ambient else UTTERANCE)
        return asyncio.run(run_demo(work, str(out), board=args.board, text=text,
                                    echo=lambda s: print(s, flush=True), verbose=args.verbose > 1,
                                    wake_phrase=phrase, wake=args.wake, ambient=args.ambient))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
