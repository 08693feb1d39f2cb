"""`alabama wake compile` / `alabama wake freeze`: responsible for the command lines of the wake-model compiler (which
model, where the board file goes) and of the frozen-module writer; not for the compiling itself (compile.py), the
module (frozen.py) or for deploying the file (deploy/image do)."""
from pathlib import Path

from ..errors import UsageError
from .compile import ROUNDINGS
from .reference import BUILTIN, compile_named


def _compile(args):
    blob = compile_named(args.model, args.rounding)
    name = Path(args.model).stem if args.model not in BUILTIN else args.model
    out = Path(args.out) if args.out else Path(name + ".aww")
    if out.is_dir():
        out = out / (name + ".aww")
    try:
        out.write_bytes(blob)
    except OSError as e:
        raise UsageError("cannot write %s (%s): give -o a writable path" % (out, e.strerror or e))
    print("%s: %d bytes -> %s" % (name, len(blob), out))
    return 0


def _freeze(args):
    from .frozen import write
    write(args.out, args.models)
    return 0


def register(sub):
    p = sub.add_parser("wake", help="on-device wake-word models (microWakeWord)")
    wsub = p.add_subparsers(dest="wake_command", metavar="ACTION")
    c = wsub.add_parser("compile", help="compile a microWakeWord .tflite into the board's model file",
                        description="MODEL is a model shipped with pymicro-wakeword (%s) or the path of your own "
                                    ".tflite with its .json beside it." % ", ".join(BUILTIN))
    c.add_argument("model", metavar="MODEL|PATH.tflite")
    c.add_argument("-o", "--out", help="output file or directory (default: ./MODEL.aww)")
    c.add_argument("--rounding", choices=ROUNDINGS, default="tflite",
                   help="tflite (default): bit-exact with TFLite's builtin kernels, which pymicro-wakeword runs; "
                        "reference: TFLite's reference kernels, as TFLite-Micro (ESPHome) runs them")
    c.set_defaults(func=_compile)
    f = wsub.add_parser("freeze", help="write the module an image freezes to hold wake models in flash",
                        description="Write OUT/alabama_wake.py: the models (pymicro-wakeword's names, .tflite paths "
                                    "compiled now, or compiled .aww files) as bytes constants, for a MicroPython "
                                    "manifest's module(). `alabama image` does this itself for the board file's "
                                    "wake.models; a model the firmware cannot load is refused in one line.")
    f.add_argument("models", nargs="+", metavar="MODEL|PATH.tflite|PATH.aww")
    f.add_argument("-o", "--out", default=".", help="output directory (default: .)")
    f.set_defaults(func=_freeze)
