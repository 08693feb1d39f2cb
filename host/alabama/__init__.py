"""Host toolchain for the Alabama satellite (codegen, reference core, provisioning, board tools, bench).

The firmware lives in ``firmware/satellite``; this package never imports it at module level.
"""
import pathlib

__version__ = "0.1.0"

#: Repository root when running from a checkout (codegen, deploy and the virtual board need it).
REPO = pathlib.Path(__file__).resolve().parent.parent.parent

#: The project's GitHub repository (owner/name): where the release workflow (.github/workflows/release.yml)
#: publishes the board images and where `alabama flash --release` fetches them (board/release.py).
GITHUB_REPOSITORY = "alabama-satellite/alabama-satellite"

#: The reference core's default TCP port (``core.server.DEFAULT_PORT``, the CLIs' defaults, the virtual board's
#: examples). It lives here, not in core/server.py, so that building the CLI parser does not import the server
#: (and numpy through the pipeline: ~0.7 s on every ``alabama`` command).
CORE_PORT = 7355
