"""docs/estimates.json, the one file of published estimates `alabama board probe` compares with, against the
docs that state them (each entry's exact words must be in its doc, with its number) and the board files (the
amp-enable estimates are the board files' own pins). A doc that changes a figure without this file, or this
file without the doc, fails here."""
import json
import re

import pytest

from alabama import REPO
from alabama.board import boards, probe

ESTIMATES = probe.load_estimates()


def _norm(text):
    return re.sub(r"\s+", " ", text)


def _numbers(text):
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


@pytest.mark.parametrize("e", ESTIMATES, ids=lambda e: "%s-%s" % (e["name"], "+".join(e.get("boards", ["all"]))))
def test_each_estimate_is_stated_in_its_doc_in_these_words(e):
    doc = REPO / e["source"]
    assert doc.is_file(), "%s names %s, which does not exist" % (e["name"], e["source"])
    assert _norm(e["quote"]) in _norm(doc.read_text()), \
        "%s: %r is no longer in %s: update docs/estimates.json with the doc" % (e["name"], e["quote"], e["source"])
    if isinstance(e["value"], (int, float)):
        assert float(e["value"]) in [n * e.get("quote_scale", 1) for n in _numbers(e["quote"])], \
            "%s: the value %s is not the number the doc states (%r)" % (e["name"], e["value"], e["quote"])


def test_estimates_name_real_boards_and_figures_the_probe_measures():
    ids = {b.id for b in boards.load_all()}
    names = set(probe.measured({"meminfo": {}}))
    for e in ESTIMATES:
        assert set(e.get("boards", ())) <= ids, e
        assert e["name"] in names | {"gc_heap_bytes", "amp_enable"}, \
            "%s is measured by no probe figure: drop it or measure it" % e["name"]
    # one estimate per figure and board: the probe must never have two to choose from
    seen = set()
    for e in ESTIMATES:
        for b in e.get("boards", ["*"]):
            assert (e["name"], b) not in seen, e
            seen.add((e["name"], b))


def test_amp_enable_estimates_are_the_board_files_own():
    for e in ESTIMATES:
        if e["name"] != "amp_enable":
            continue
        for b in e["boards"]:
            amp = boards.load(b).data["amp_enable"]
            if "pin" in amp:
                assert e["value"] == "GPIO%d" % amp["pin"], (b, amp)
            else:
                assert "0x%02X" % amp["address"] in e["value"] and "0x%02X" % amp["mask"] in e["value"], (b, amp)


def test_the_file_is_what_the_probe_reads():
    data = json.loads((REPO / "docs" / "estimates.json").read_text())
    assert data["format"] == 1 and data["estimates"] == ESTIMATES
