"""`alabama board press|release|long|mic`: one command to a running virtual board's control channel.

Responsible for: the command line's way to push the virtual board's button and choose what its microphone
hears (the same line protocol the web page and the tests use: firmware/satellite/hal/sim.py), converting a
mic WAV of any rate/channels to the 16 kHz mono the board reads (alabama.audio.to_mic_wav), one line per
mistake. Not for: running the board (board/sim.py) or the web page (board/web.py).
"""
import os
import pathlib
import socket
import tempfile

from ..errors import AlabamaError, UsageError
from .. import usage

HOST = "127.0.0.1"
#: How long one command may take: the board answers within a scheduler turn; a hung one is said so.
TIMEOUT_S = 5.0
#: A reply line longer than this is not the control channel talking.
MAX_REPLY = 65536
#: The environment variable that names the control port when --ctl-port is not given.
ENV_PORT = "ALABAMA_SIM_CTL_PORT"


class SimCtlError(AlabamaError):
    pass


class SimCtlUsageError(SimCtlError, UsageError):
    """Which board (no --ctl-port) or a WAV that is missing or no WAV: the command line's mistake, exit status 2;
    no board answering on the port stays SimCtlError (1)."""


def send(port, line, timeout=TIMEOUT_S):
    """Send one command line to the control channel on 127.0.0.1:port; its reply after "ok" (SimCtlError
    for "err ..." or no board)."""
    try:
        c = socket.create_connection((HOST, port), timeout=timeout)
    except ConnectionRefusedError:
        raise SimCtlError("no virtual board answers on %s:%d: start one with `alabama board sim --dir DIR ...` "
                          "and pass the port it prints (\"control on 127.0.0.1:N\") as --ctl-port N"
                          % (HOST, port)) from None
    except OSError as e:
        raise SimCtlError("cannot reach %s:%d: %s" % (HOST, port, e.strerror or e)) from None
    buf = b""
    try:
        with c:
            c.sendall(line.encode() + b"\n")
            while b"\n" not in buf:
                d = c.recv(4096)
                if not d:
                    break
                buf += d
                if len(buf) > MAX_REPLY:
                    raise SimCtlError(_not_ctl(port))
    except socket.timeout:
        raise SimCtlError("%s:%d did not answer %r within %.0f s: is it a virtual board's control port (the one "
                          "`alabama board sim` prints as \"control on 127.0.0.1:N\")? If it is, the board is stuck "
                          "(see its log)" % (HOST, port, line.split()[0], timeout)) from None
    except OSError as e:
        raise SimCtlError("the virtual board on %s:%d dropped the command: %s" % (HOST, port, e.strerror or e)) from None
    reply = buf.partition(b"\n")[0].decode("utf-8", "replace")
    if reply == "ok" or reply.startswith("ok "):
        return reply[3:]
    if reply.startswith("err "):
        raise SimCtlError("the virtual board refused %r: %s" % (line.split()[0], reply[4:]))
    raise SimCtlError(_not_ctl(port))


def _not_ctl(port):
    return ("%s:%d does not talk like a virtual board's control channel (a core's port?): pass the port `alabama board "
            "sim` prints as \"control on 127.0.0.1:N\" as --ctl-port N" % (HOST, port))


def mic_file(src, dest):
    """Convert the WAV at ``src`` to the mic's 16 kHz mono WAV at ``dest`` (written whole, then renamed: a board
    never reads half a file). Returns (dest, its duration in seconds)."""
    from .. import audio
    path = pathlib.Path(src)
    if not path.is_file():
        raise SimCtlUsageError("no WAV file at %s: record one (any rate, mono or stereo), e.g. "
                               "`arecord -f S16_LE -r 16000 -c 1 -d 5 in.wav` or `espeak-ng -w in.wav \"what time is "
                               "it\"`" % src)
    dest = pathlib.Path(dest)
    tmp = dest.with_suffix(".part")
    try:
        seconds = audio.to_mic_wav(path, tmp)
    except audio.WavError as e:
        raise SimCtlUsageError("%s: %s (any 8- or 16-bit PCM WAV, mono or stereo, 4-192 kHz)" % (src, e)) from None
    except OSError as e:
        raise SimCtlUsageError("cannot read %s: %s" % (src, e.strerror or e)) from None
    os.replace(tmp, dest)
    return str(dest), seconds


def register(bsub):
    for name, what in (("press", "push the virtual board's button (and hold it)"),
                       ("release", "release the virtual board's button"),
                       ("long", "a long press of the virtual board's button (held past the long-press time)"),
                       ("mic", "choose what the virtual board's microphone hears next: a WAV (any rate, mono or "
                               "stereo: converted to 16 kHz mono) or `silence`")):
        p = bsub.add_parser(name, help=what,
                            description=what[0].upper() + what[1:] + ", over the control channel of a running "
                                        "`alabama board sim` (it prints \"control on 127.0.0.1:N\").")
        if name == "mic":
            p.add_argument("wav", metavar="FILE|silence", help="a WAV file, or `silence`")
        p.add_argument("--ctl-port", type=usage.tcp_port(), metavar="N",
                       help="the board's control port (default: $%s)" % ENV_PORT)
        p.set_defaults(func=cmd_ctl, ctl_command=name)


def cmd_ctl(args):
    port = args.ctl_port
    if port is None:
        env = os.environ.get(ENV_PORT, "")
        if not env.isdigit():
            raise SimCtlUsageError("which virtual board? pass --ctl-port N (`alabama board sim` prints \"control on "
                                   "127.0.0.1:N\") or set %s" % ENV_PORT)
        port = int(env)
    if not 0 < port < 65536:
        raise SimCtlUsageError("--ctl-port %d is not a TCP port (1-65535)" % port)
    if args.ctl_command == "mic":
        if args.wav == "silence":
            send(port, "mic silence")
            print("mic: silence")
            return 0
        # in this computer's temp directory, one file per board (its port): the next `board mic` replaces it
        path, seconds = mic_file(args.wav, pathlib.Path(tempfile.gettempdir()) / ("alabama-sim-mic-%d.wav" % port))
        send(port, "mic %s" % path)
        print("mic: %s (%.2f s, as 16 kHz mono), played from its start while the button is held" % (args.wav, seconds))
        return 0
    send(port, args.ctl_command)
    print("button: %s" % args.ctl_command)
    return 0
