"""The unrolled viper modules are generated (tools/gen_*_viper.py); a hand edit or a generator change
that was not re-run fails here, like the codec's drift check."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("gen", ["gen_x25519_viper.py", "gen_chacha_viper.py"])
def test_generated_viper_module_matches_its_generator(gen):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / gen), "--check"], capture_output=True, text=True,
                       cwd=str(ROOT), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
