"""Host toolchain for the Alabama satellite (codegen, reference core, provisioning, board tools, bench).

The firmware lives in ``firmware/satellite``; this package never imports it at module level.
"""
import pathlib

__version__ = "0.1.0"

#: Repository root when running from a checkout (codegen, deploy and the virtual board need it).
REPO = pathlib.Path(__file__).resolve().parent.parent.parent
