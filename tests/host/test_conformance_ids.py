"""One vocabulary of requirement IDs: the conformance kits' rows, the reference core's per-session report (its
violation rules), the HIL report (the scenarios' spec markers) and the fixtures all name IDs of REQUIREMENTS.md, and
each kit scores only the rows of its side (the core kit: who C; the satellite kit: who S)."""
import ast
import os
import pathlib
import re

import pytest

from alabama.conformance import corekit, satkit

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _requirements():
    base = os.environ.get("ALABAMA_SHARED") or str(ROOT.parent / "shared")
    p = pathlib.Path(base) / "REQUIREMENTS.md"
    if not p.is_file():
        pytest.skip("no REQUIREMENTS.md at %s (set ALABAMA_SHARED to the shared folder)" % p)
    return {m.group(1): set(m.group(2).replace(",", " ").split())
            for m in re.finditer(r"^\| (R[0-9.]+-[a-z]) \| ([SC ,]+) \|", p.read_text(), re.M)}


def _string_calls(tree, names):
    """First string arguments of calls to any of ``names`` (a method or function name)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in names and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                yield node.args[0].value


def test_each_kit_scores_requirements_of_its_own_side():
    req = _requirements()
    for rid, _ in corekit.ROWS:
        assert rid in req and "C" in req[rid], (rid, req.get(rid))
    for rid, _ in satkit.ROWS:
        assert rid in req and "S" in req[rid], (rid, req.get(rid))
    assert len({r for r, _ in satkit.ROWS}) == len(satkit.ROWS)


def test_each_kit_lists_every_requirement_of_its_side_scored_or_said_why_not():
    """The core kit's table names every C requirement, the satellite kit's every S requirement: scored, or not
    observable with the reason (so a requirement is never silently left out of a kit)."""
    req = _requirements()
    assert {r for r, _ in corekit.ROWS} == {r for r, who in req.items() if "C" in who}
    sat = {r for r, _ in satkit.ROWS} | set(satkit.UNOBSERVABLE)
    assert sat == {r for r, who in req.items() if "S" in who}, sorted(sat ^ {r for r, who in req.items() if "S" in who})
    assert not {r for r, _ in satkit.ROWS} & set(satkit.UNOBSERVABLE)
    assert set(satkit.UNOBSERVABLE) == set(satkit.UNOBSERVABLE_TITLES)


def test_the_core_report_and_the_hil_report_name_requirement_ids():
    req = _requirements()
    rules = set()
    for p in (ROOT / "host" / "alabama" / "core").glob("*.py"):
        rules |= set(_string_calls(ast.parse(p.read_text()), {"_violate", "_bad"}))
    assert rules and rules <= set(req), sorted(rules - set(req))
    markers = set()
    for p in (ROOT / "host" / "alabama" / "hil" / "scenarios").glob("test_*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "spec":
                markers |= {a.value for a in node.args if isinstance(a, ast.Constant) and a.value.startswith("R")}
    assert markers and markers <= set(req), sorted(markers - set(req))


def test_the_fixtures_name_requirement_ids():
    import json
    req = _requirements()
    idx = json.loads((ROOT / "conformance" / "index.json").read_text())
    named = {r for c in idx["cases"] for r in c["requirements"]}
    assert named <= set(req), sorted(named - set(req))
