"""`alabama codegen [--check]`: argument parsing only; the work is in alabama.codegen.generate."""
from . import generate as gen


def register(subparsers):
    p = subparsers.add_parser(
        "codegen", help="generate host pb2 modules and the firmware codec from proto/alabama/v1",
        description="Generate host/alabama/v1/*_pb2.py (protoc) and firmware/satellite/wire/alabama_v1.py "
                    "from proto/alabama/v1/*.proto and the bounds in alabama.options.")
    p.add_argument("--check", action="store_true",
                   help="regenerate in memory and exit 1 naming the first file that differs from the committed one")
    p.add_argument("--root", default=None, help="repository root (default: the one this tool runs from)")
    p.set_defaults(func=run)


def run(args):
    from .. import extras
    extras.need("grpc_tools", "alabama codegen (protoc)")
    cfg = gen.Config(root=args.root) if args.root else gen.Config()
    if args.check:
        gen.check(cfg)
        print("alabama codegen: generated files are up to date")
        return 0
    changed = gen.write(cfg)
    for rel in changed:
        print("wrote %s" % rel)
    if not changed:
        print("alabama codegen: nothing changed")
    return 0
