"""Sub-commands `alabama flash` and `alabama board list|show|validate|sim` (`board probe`: board/probe.py;
`board press|release|long|mic`: board/simctl.py); argument parsing only."""
import argparse
import json

from ..errors import UsageError
from . import boards, images


def register(sub):
    p = sub.add_parser("flash", help="erase a board, write MicroPython (the pinned image or a release's), then "
                                     "deploy",
                       description="Erase the board, write the official MicroPython image its board file "
                                   "names, then deploy the firmware. The image is downloaded once into the user "
                                   "cache (ALABAMA_IMAGE_CACHE overrides) and checked against the sha256 pinned in "
                                   "the repository, --image-sha256, or the one recorded on its first download "
                                   "(images.lock.json beside it: a later download that differs is refused). "
                                   "--release TAG writes the image "
                                   "with the firmware frozen in from the project's release TAG instead (no ESP-IDF "
                                   "needed; docs/image.md).")
    p.add_argument("--board", required=True, metavar="NAME", help="board id (boards/NAME.json) or a board file path")
    p.add_argument("--port", metavar="PORT", help="serial port (default: the one Espressif USB device attached)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--firmware", metavar="PATH", help="flash this .bin instead of the pinned image")
    src.add_argument("--release", metavar="TAG",
                     help="flash the image with the firmware frozen in that the project's release TAG carries for "
                          "--board (downloaded into build/releases/, its sha256 checked; ALABAMA_RELEASES_URL "
                          "overrides GitHub's API)")
    p.add_argument("--image-sha256", metavar="HEX", help="the official image's sha256 (64 hex digits): refuse any "
                   "other file (it replaces the first-use record)")
    p.add_argument("--image-url", metavar="URL", help="a mirror of the official images: a directory URL serving "
                   "their file names, or the .bin's own URL (default: $ALABAMA_IMAGE_URL, else micropython.org)")
    p.add_argument("--no-deploy", action="store_true", help="stop after writing MicroPython")
    p.add_argument("--dry-run", action="store_true", help="print the esptool commands, touch nothing")
    p.add_argument("--allow-mpy", action="store_true",
                   help="deploy the .mpy files even where the board file's heap cannot hold them")
    p.set_defaults(func=cmd_flash)

    b = sub.add_parser("board", help="board files (list, show, validate), the virtual board (sim), measuring a "
                                     "board (probe)",
                       description="`alabama board list` prints one line per board file, `show NAME` one board "
                                   "with its derived facts, `validate [FILE...]` checks board files (all of "
                                   "boards/ by default), `sim` runs the firmware on the virtual board (`press`, "
                                   "`release`, `long` and `mic FILE` drive a running one), `probe` measures a "
                                   "board beside the estimates we publish (docs/probe.md).")
    bsub = b.add_subparsers(dest="board_command", metavar="ACTION")
    bl = bsub.add_parser("list", help="one line per board")
    bl.set_defaults(func=cmd_list)
    bs = bsub.add_parser("show", help="a board file with its derived facts")
    bs.add_argument("name", metavar="NAME")
    bs.set_defaults(func=cmd_show)
    bv = bsub.add_parser("validate", help="check board files (all of boards/ by default)")
    bv.add_argument("files", nargs="*", metavar="FILE", help="a board file, or a board id (its boards/ file)")
    bv.set_defaults(func=cmd_validate)
    from . import sim                 # `alabama board sim`: the virtual board (alabama.board.sim registers it)
    sim.register(bsub)
    from . import probe               # `alabama board probe`: measure a board beside our estimates
    probe.register(bsub)
    from . import simctl              # `alabama board press|release|long|mic`: a running virtual board's controls
    simctl.register(bsub)
    # Bare `alabama board` says its commands in one line, status 2, as every other group does (alabama.usage.Parser):
    # its commands are unlike one another (files, the virtual board, a probe), so no one of them is the obvious
    # default, and a group that sometimes runs something and sometimes refuses teaches nothing.

    # The old spelling: not listed in --help, one line naming the new command.
    gone = sub.add_parser("boards", add_help=False)
    gone.add_argument("rest", nargs=argparse.REMAINDER)
    gone.set_defaults(func=cmd_boards_gone)

    from . import deploy, image, ota, repl, signing  # `alabama deploy`, `image`, `ota`, `repl`, `logs`, `release-key`
    deploy.register(sub)
    image.register(sub)
    ota.register(sub)
    signing.register(sub)
    repl.register(sub)


def cmd_flash(args):
    from . import flash
    board = boards.load(args.board, option="--board")
    flash.flash(board, port=args.port, firmware=args.firmware, deploy=not args.no_deploy, dry_run=args.dry_run,
                allow_mpy=args.allow_mpy, release=args.release, image_sha256=args.image_sha256, mirror=args.image_url)
    return 0


def cmd_boards_gone(args):
    raise UsageError("`alabama boards` is now `alabama board`: run `alabama board %s`"
                     % " ".join(args.rest or ["list"]))


def cmd_list(args):
    rows = [("ID", "DUPLEX", "IMAGE", "NAME")]
    for bd in boards.load_all():
        rows.append((bd.id, bd.duplex, bd.image or "(unix port)", bd.name))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("%-*s  %-*s  %-*s  %s" % (w[0], r[0], w[1], r[1], w[2], r[2], r[3]))
    return 0


def cmd_show(args):
    bd = boards.load(args.name)
    print(json.dumps(bd.data, indent=2))
    if bd.image:
        img = images.image_for(bd.image)
        print("image: %s  %s  sha256 %s" % (img.file, img.url, img.sha256 or _first_use(img.file)))
    print("pins: " + ", ".join("GPIO%d=%s" % (p, "+".join(f)) for p, f in sorted(bd.pins().items())))
    return 0


def _first_use(file):
    from . import imagelock
    try:
        rec = imagelock.entry(file)
    except imagelock.LockError as e:
        return "(not pinned; %s)" % e
    if rec is None:
        return "(not pinned: recorded on its first download)"
    return "%s (recorded on first use %s, %s)" % (rec["sha256"], rec.get("recorded", "?"), imagelock.lock_path())


def _readable(path, typed):
    """UsageError (one line) unless PATH is a file this user can read: a typo'd id names the nearest board."""
    import pathlib
    p = pathlib.Path(path)
    if p.exists() and not p.is_dir() and not p.is_file():
        raise UsageError("%s is not a regular file: give a board .json file, or a board id" % typed)
    if not p.is_file():
        boards.load(typed)               # its one line: no board 'simm' (did you mean 'sim'?), a directory, no file
        raise UsageError("no board file %s: give a board .json file, or a board id" % typed)
    try:
        open(path, "rb").close()
    except OSError as e:
        raise UsageError("cannot read %s (%s): give a board file you can read" % (typed, e.strerror or e)) from None


def cmd_validate(args):
    # each file as the user named it; boards/ itself as boards/NAME.json (never where the package is installed)
    # a board id (`validate sim`) is its boards/ file, as show and --board take it
    paths = [(boards.id_path(p), "boards/%s.json" % p) if boards.id_path(p) else (p, p) for p in args.files] \
        if args.files else [(p, "boards/" + p.name) for p in boards.board_paths()]
    for p, label in paths:               # a file that cannot be read is the command line's mistake, not a report
        _readable(p, label)
    bad = 0
    for p, label in paths:
        try:
            problems = boards.check(boards.read(p, label), p, label)
        except boards.BoardError as e:
            problems = [str(e)]
        for line in problems:
            print(line)
        if problems:
            bad += 1
        else:
            print("ok %s" % label)
    return 1 if bad else 0
