"""The short soak (the long one is `make soak`, tools/soak/run.py; method in docs/soak.md): back-to-back
push-to-talk exchanges on the virtual board with link cuts mid-capture and mid-render, the board's free heap
after gc.collect() and the core's RSS sampled after each. Every exchange must complete and neither series may
trend. The trend check is shown to fail on synthetic leaking series and on a firmware mutant that brings back
the per-exchange leak the soak found (finished tasks kept for the life of a session)."""
import pathlib
import random
import shutil
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "soak"))

import soak  # noqa: E402

# ----------------------------------------------------------------------------------- the trend check itself
def _series(n, slope, noise, seed=3, base=60000.0):
    rnd = random.Random(seed)
    return list(range(1, n + 1)), [base + slope * i + rnd.gauss(0, noise) for i in range(1, n + 1)]


def test_trend_flat_noisy_series_passes():
    xs, ys = _series(200, 0.0, 150)
    t = soak.trend(xs, ys, floor=1024, bad_sign=-1)
    assert t["flat"], t
    assert abs(t["slope"]) < 5


def test_trend_leaking_heap_fails():
    # 40 bytes per exchange of free heap lost, under noise of 150 bytes: 8 KB over the run
    xs, ys = _series(200, -40.0, 150)
    t = soak.trend(xs, ys, floor=1024, bad_sign=-1)
    assert not t["flat"], t
    assert -45 < t["slope"] < -35


def test_trend_growth_of_free_heap_is_not_a_leak():
    xs, ys = _series(200, +40.0, 150)
    assert soak.trend(xs, ys, floor=1024, bad_sign=-1)["flat"]
    assert not soak.trend(xs, ys, floor=1024, bad_sign=+1)["flat"]      # but rising RSS is


def test_trend_late_step_fails_even_when_the_line_is_diluted():
    # flat for 3/4 of the run, then 6 KB gone at once: the quartile comparison catches it
    xs = list(range(1, 201))
    ys = [60000.0 if i <= 150 else 54000.0 for i in xs]
    t = soak.trend(xs, ys, floor=1024, bad_sign=-1)
    assert not t["flat"], t
    assert t["q4_minus_q2"] == -6000


def test_trend_wants_enough_samples():
    with pytest.raises(ValueError):
        soak.trend([1, 2, 3], [1, 2, 3], floor=1)


def test_linfit_exact():
    a, b, s = soak.linfit([1, 2, 3, 4], [3, 5, 7, 9])
    assert (round(a, 9), round(b, 9), round(s, 9)) == (1, 2, 0)


# ----------------------------------------------------------------------------------- on the virtual board
#: The leak the soak found, brought back: Satellite.spawn no longer drops finished tasks.
LEAK_MUTANT = ("satellite/device.py",
               "        ts = self.tasks\n        i = len(ts)\n        while i:\n            i -= 1\n"
               "            if ts[i].done():\n                ts.pop(i)\n",
               "        ts = self.tasks\n")


def _mutant(dst):
    shutil.copytree(REPO / "firmware", dst, ignore=shutil.ignore_patterns("__pycache__", "*.mpy"))
    rel, old, new = LEAK_MUTANT
    p = pathlib.Path(dst) / rel
    text = p.read_text()
    if text.count(old) != 1:
        pytest.fail("the leak mutant is stale: its anchor occurs %d times in %s; update LEAK_MUTANT to the "
                    "current firmware" % (text.count(old), rel))
    p.write_text(text.replace(old, new))
    return dst


@pytest.mark.needs_micropython
def test_soak_short(tmp_path):
    """32 exchanges, cuts before the 12th (mid-capture) and the 24th (mid-render), at the virtual board's heap
    (the board file's heap on the 32-bit port): all complete, both cuts reconnect, no trend after 10."""
    s = soak.Soak(tmp_path / "soak", exchanges=32, cut_every=12, warmup=10, log=lambda *a: None)
    r = s.run()
    print("\n" + soak.table(r))
    assert r["failures"] == [], r["failures"]
    assert r["completed"] == r["exchanges"] == 32
    assert [c["phase"] for c in r["cuts"]] == ["capture", "render"]
    assert all(c["links_cut"] == 1 for c in r["cuts"]), r["cuts"]
    assert r["reconnects"] == 2 and r["board_boots"] == 1 and r["internal_errors"] == 0
    assert r["conformance_violations"] == 0, r["violations"]
    assert r["heap"]["flat"], r["heap"]
    assert r["rss"]["flat"], r["rss"]
    assert r["pass"]


@pytest.mark.needs_micropython
def test_soak_catches_the_task_leak_mutant(tmp_path):
    """The same check on firmware that keeps every finished task: the free heap trend fails it."""
    fw = _mutant(tmp_path / "fw")
    s = soak.Soak(tmp_path / "soak", exchanges=18, cut_every=0, warmup=4, firmware=fw, log=lambda *a: None)
    r = s.run()
    print("\n" + soak.table(r))
    assert r["completed"] == 18, r["failures"]        # it still works: only the heap gives it away
    assert not r["heap"]["flat"], r["heap"]
    assert r["heap"]["slope"] < 0
    assert not r["pass"]
