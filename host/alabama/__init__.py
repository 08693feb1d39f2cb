"""Host toolchain for the Alabama satellite (codegen, reference core, provisioning, board tools, bench).

The firmware lives in ``firmware/satellite``; this package never imports it at module level.
Responsible for: the version, and the one locator of the project's data (REPO: firmware/, boards/, proto/,
docs/estimates.json) and of where build output goes (BUILD), in a checkout and in an installed wheel alike.
"""
import importlib.resources
import os
import pathlib

#: The tool's version (pyproject.toml reads it from here: its one owner).
__version__ = "0.2.0"

_PACKAGE = pathlib.Path(__file__).resolve().parent
#: Where the wheel carries the data trees (setup.py copies them there from the checkout, the source of truth).
DATA_DIR = "_data"
#: The trees and files, relative to the repository root, that the wheel carries under alabama/_data/.
DATA_TREES = ("firmware", "boards", "proto", "docs/estimates.json")


def _in_checkout(root):
    return (root / "pyproject.toml").is_file() and (root / "boards").is_dir() and (root / "firmware").is_dir()


#: True when this package runs from a checkout (host/alabama inside the repository, editable install included).
CHECKOUT = _in_checkout(_PACKAGE.parent.parent)

#: The root the data trees hang from: the repository in a checkout, alabama/_data in an installed wheel (read
#: through importlib.resources; a wheel installs unpacked, so it is a directory). REPO / "firmware",
#: REPO / "boards", REPO / "proto" mean the same in both.
REPO = _PACKAGE.parent.parent if CHECKOUT else pathlib.Path(str(importlib.resources.files(__name__) / DATA_DIR))


def carried(tree="firmware"):
    """How help and errors name a tree of DATA_TREES as this alabama has it, both ways it runs: "this checkout's
    firmware/ (PATH)", or from an installed wheel "the firmware/ installed with alabama (PATH)"."""
    where = REPO / tree
    return ("this checkout's %s/ (%s)" if CHECKOUT else "the %s/ installed with alabama (%s)") % (tree, where)


def _build_root():
    if os.environ.get("ALABAMA_BUILD_DIR"):
        return pathlib.Path(os.environ["ALABAMA_BUILD_DIR"])
    if CHECKOUT:
        return REPO / "build"
    import platformdirs                 # only when installed: keeps `alabama --help` from importing it
    return pathlib.Path(platformdirs.user_cache_dir("alabama", appauthor=False)) / "build"


#: Where compiled modules, images, the virtual boards' caches and releases go: the checkout's build/, else the
#: platform's user cache dir (never inside site-packages); $ALABAMA_BUILD_DIR overrides.
BUILD = _build_root()

#: The project's GitHub repository (owner/name): where the release workflow (.github/workflows/release.yml)
#: publishes the board images and where `alabama flash --release` fetches them (board/release.py).
GITHUB_REPOSITORY = "alabama-satellite/alabama-satellite"

#: The reference core's default TCP port (``core.server.DEFAULT_PORT``, the CLIs' defaults, the virtual board's
#: examples). It lives here, not in core/server.py, so that building the CLI parser does not import the server
#: (and numpy through the pipeline: ~0.7 s on every ``alabama`` command).
CORE_PORT = 7355
