"""Build step only: the wheel carries the data trees the host package reads (alabama.DATA_TREES: firmware/,
boards/, proto/, docs/estimates.json) under alabama/_data/, copied from the checkout, which stays their source of
truth. An editable install copies nothing: it reads the checkout (alabama.REPO). Everything else is pyproject.toml.
"""
import ast
import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
#: What never ships: caches and compiled modules (.gitignore ignores them too).
SKIP_DIRS = {"__pycache__"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".mpy")


def data_trees():
    """alabama.DATA_TREES, read without importing the package (the build may run in another Python)."""
    tree = ast.parse((ROOT / "host" / "alabama" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DATA_TREES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError("host/alabama/__init__.py has no DATA_TREES")


def data_files():
    """Every file the wheel carries under alabama/_data/, as paths relative to the checkout."""
    for top in data_trees():
        p = ROOT / top
        if p.is_file():
            yield pathlib.PurePosixPath(top)
            continue
        for f in sorted(p.rglob("*")):
            rel = f.relative_to(ROOT)
            if f.is_file() and not SKIP_DIRS.intersection(rel.parts) and not f.name.endswith(SKIP_SUFFIXES):
                yield pathlib.PurePosixPath(rel.as_posix())


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = pathlib.Path(self.build_lib) / "alabama" / "_data"
        if dest.exists():
            shutil.rmtree(dest)                 # a stale build/lib never ships a file the checkout dropped
        for rel in data_files():
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, out)


setup(cmdclass={"build_py": BuildPyWithData})
