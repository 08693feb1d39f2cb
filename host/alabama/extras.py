"""Optional dependencies: which extra of alabama-satellite brings a module, and the one line when it is missing.

Responsible for: the table module -> extra and `need()`, used by the commands that need an optional module
(codegen: grpc_tools; the speech brain and wake-phrase spotting: pocketsphinx; the Wyoming client and server:
wyoming; `alabama hil`: pytest and its plugins). Not for: importing those modules for the caller.
"""
import importlib.util

from .errors import AlabamaError

#: module -> the extra that installs it (pyproject.toml [project.optional-dependencies]).
EXTRAS = {
    "grpc_tools": "dev",
    "pocketsphinx": "speech",
    "wyoming": "speech",
    "pytest": "hil",
    "xdist": "hil",
    "pytest_timeout": "hil",
}


class MissingExtra(AlabamaError):
    """An optional dependency is not installed; the message names the extra to install."""


def have(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):          # a finder that refuses it, or a module set to None in sys.modules
        return False


def need(module, what):
    """Raise MissingExtra (one line) unless `module` can be imported; `what` is the feature that needs it."""
    if not have(module):
        extra = EXTRAS[module]
        raise MissingExtra("%s needs the optional dependency %s: %s" % (what, module.split(".")[0], hint(extra)))


def package_hint(dist):
    """The one command that installs DIST, a runtime dependency that went missing, where this alabama runs: `make
    install` in a checkout (its venv), else pip into alabama's own interpreter (a wheel has no Makefile)."""
    import shlex
    import sys
    from . import CHECKOUT
    if CHECKOUT:
        return "`make install`"
    return "`%s -m pip install %s`" % (shlex.quote(sys.executable), dist)


def hint(extra):
    """The one command that installs `extra` where this alabama runs: into its own interpreter (a venv's, pipx's:
    a bare `pip` may be another Python's), from the package index, or editable from the checkout it runs from."""
    import shlex
    import sys
    from . import CHECKOUT, REPO
    what = ("-e %s" % shlex.quote("%s[%s]" % (REPO, extra))) if CHECKOUT else "'alabama-satellite[%s]'" % extra
    return "%s -m pip install %s" % (shlex.quote(sys.executable), what)
