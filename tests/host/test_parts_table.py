"""The multi-part provisioning table runner (tools/provision/parts_table.py, `make parts-table`,
docs/provisioning.md "Records over 140 bytes") works end to end in a trial: a record with a 32-byte SSID
and a 63-byte passphrase, in parts through the reliability table's channel at 0 dB, stored by the
firmware's listening mode under micropython. Decisions only, nothing timed."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "provision"))

pytestmark = pytest.mark.needs_micropython
pytest.importorskip("ggwave")
pytest.importorskip("numpy")
import parts_table as PT  # noqa: E402


def test_one_trial_at_0_db_is_stored_from_its_parts(capsys):
    lines = []
    rows, wrong = PT.run(1, [0.0], [1.02], seed=36, out=lines.append)
    text = "\n".join(lines)
    assert "records with a 32-byte SSID and a 63-byte passphrase (2 parts)" in text, text
    assert "| 0 | 100% / 100% |" in text and rows[(0.0, 1.02)] == [1, 1] and wrong == 0, text


def test_bad_options_are_one_line_errors(capsys):
    for argv in (["--drift", "2"], ["--trials", "0"], ["--snr", "x"]):
        with pytest.raises(SystemExit) as e:
            PT.main(argv)
        assert e.value.code == 2
        assert "error:" in capsys.readouterr().err
