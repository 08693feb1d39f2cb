"""DEFERRED store-and-forward on the virtual board (issue 13, docs/deferred.md): real MicroPython, real Noise,
the reference core behind the fault-injecting relay, 127.0.0.1 only.

The short version of the cut campaign (tools/deferred/run.py runs >= 100 cuts): recordings made while the
core is out of reach are delivered exactly once (0 chunks lost, 0 stored twice, byte-identical to what the
board recorded on its flash) however the upload is cut (R10.4-d), with capture_ts mapped to the wall clock
within 20 ms through the Ping round (R10.2-a); a board reset mid-upload resumes; a full ring drops the oldest
recording, logged and counted."""
import logging
import random

import pytest

from alabama.hil import deferred as HD
from alabama.hil.bench import sim_bench

SEED = 13


def _bench(tmp):
    return sim_bench(tmp, log=lambda *a: None)


@pytest.fixture(scope="module")
def dbench(tmp_path_factory):
    logging.getLogger("alabama.core").setLevel(logging.ERROR)
    bench = _bench(tmp_path_factory.mktemp("deferred"))
    db = HD.DeferredBench(bench, rng=random.Random(SEED))
    try:
        db.up()
        yield db
    finally:
        bench.close()


def test_r10_4_d_offline_press_is_delivered_once_and_r10_2_a_mapped_to_wall_clock_within_20ms(dbench):
    (row,) = HD.scenario_offline_press_delivered(dbench)
    assert row["chunks"] >= 40 and abs(row["clock_err_us"]) <= HD.CLOCK_BOUND_US


def test_r10_4_d_uploads_cut_at_random_points_are_delivered_exactly_once(dbench):
    rows, summary = HD.scenario_cuts(dbench, 6, seed=SEED)
    assert summary["cuts"] >= 6, summary              # the cuts really landed with chunks still to go
    assert summary["lost"] == 0 and summary["stored_twice"] == 0 and summary["identical"] == len(rows)
    assert summary["resent_flagged"] == 0 and summary["responses_extra"] == 0
    assert summary["clock_err_us_max"] <= HD.CLOCK_BOUND_US


def test_r10_4_d_a_board_reset_mid_upload_resumes_and_delivers_once(dbench):
    stored, total = HD.scenario_reboot_mid_upload(dbench)
    assert 0 < stored < total


def test_ring_full_drops_the_oldest_recording_logged_and_counted(tmp_path):
    logging.getLogger("alabama.core").setLevel(logging.ERROR)
    bench = _bench(tmp_path)
    db = HD.DeferredBench(bench, rng=random.Random(SEED), ring_kb=48)   # ~74 chunks: two 30-chunk recordings
    try:
        db.up()
        HD.scenario_ring_full(db)
    finally:
        bench.close()


def test_r10_4_d_a_recording_survives_a_reset_before_the_core_is_back_and_keeps_its_time(dbench):
    (row,) = HD.scenario_reboot_before_upload(dbench)
    assert abs(row["clock_err_us"]) <= HD.CLOCK_BOUND_US


def test_issue_32_an_upload_cut_after_a_reset_finishes_on_the_same_clock(dbench):
    (row,) = HD.scenario_reset_then_cut_upload(dbench)
    assert abs(row["clock_err_us"]) <= HD.CLOCK_BOUND_US
