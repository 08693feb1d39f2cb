# dual: cpython micropython
# A firmware on trial proves itself (satellite.trial, docs/ota.md "The trial"): confirmed only after a session
# stayed healthy for the confirmation window with Ping rounds answered, never at Accepted; rolled back when not
# proven within its deadline, counted across its boots (ota/state.json), a module set by otaboot at the next
# boot and an image by the bootloader at the reset. The clock and the reset are parameters here.
import os

from mpsupport import mem_alloc_delta
import otaboot as B
from satellite import trial as T
from test_ota import fresh, installed_old_and_staged_new, read

BOARD = {"id": "sim", "trial": {"confirm_ms": 3000, "deadline_ms": 20000}}


class Resets:
    def __init__(self):
        self.notes = []

    def __call__(self, note):
        self.notes.append(note)


def on_trial():
    """A staged set swapped in by otaboot at boot: state trial, boot 1."""
    old, new = installed_old_and_staged_new()
    B.boot()
    assert B.state()["state"] == "trial"
    return old, new


def test_no_trial_without_an_update_or_after_one_was_confirmed():
    fresh()
    assert T.open_trial(BOARD, 0, print) is None                   # no ota/state.json
    B.set_state({"state": "ok", "version": "2.0"})
    assert T.open_trial(BOARD, 0, print) is None                   # files board, nothing on trial
    B.set_state({"state": "rolled_back", "version": "2.0"})
    assert T.open_trial(BOARD, 0, print) is None
    B.set_state({"state": "image_trial", "version": "2.0", "from": "ota_0", "to": "ota_1"})
    assert T.open_trial(BOARD, 0, print).deadline_ms == 20000


def test_window_and_deadline_come_from_the_board_file_with_defaults():
    on_trial()
    t = T.open_trial(BOARD, 0, print)
    assert (t.confirm_ms, t.deadline_ms) == (3000, 20000)
    t = T.open_trial({"id": "x"}, 0, print)
    assert (t.confirm_ms, t.deadline_ms) == (T.CONFIRM_MS, T.DEADLINE_MS)
    said = []
    for bad in ({"confirm_ms": 5000, "deadline_ms": 5000}, {"confirm_ms": "3s"}, {"deadline_ms": 10}):
        t = T.open_trial({"id": "x", "trial": bad}, 0, said.append)   # a board.json nobody validated
        assert (t.confirm_ms, t.deadline_ms) == (T.CONFIRM_MS, T.DEADLINE_MS), bad
    assert len(said) == 3 and "using 60000 and 300000" in said[0]
    assert T.CONFIRM_MS < T.DEADLINE_MS


def test_trial_is_not_proven_at_accepted_only_after_a_healthy_window_with_ping_rounds():
    on_trial()
    t = T.open_trial(BOARD, 1000, print, Resets())
    assert not t.proven(1000, 5)                      # no session yet
    t.session(2000)                                   # Accepted
    assert not t.proven(2000, 0)                      # at Accepted: never
    assert not t.proven(2050, 1)                      # ~50 ms later, one round: no
    assert not t.proven(4999, 4)                      # the window is not over
    assert not t.proven(5000, 1)                      # the window is over but one Ping round is not enough
    assert t.proven(5000, T.MIN_ROUNDS)
    t.ended()                                         # the session ended (an error, the link): start again
    assert not t.proven(9000, 9)
    t.session(9000)
    assert not t.proven(11000, 9) and t.proven(12000, 9)


def test_trial_deadline_counts_across_boots_and_rolls_a_set_back():
    old, new = on_trial()
    r = Resets()
    t = T.open_trial(BOARD, 100, print, r)
    assert not t.tick(100 + T.SAVE_MS)                 # saved: 10 s spent
    assert B.state()["trial_ms"] == T.SAVE_MS and B.state()["state"] == "trial"
    assert not t.tick(100 + T.SAVE_MS + 4000)          # 14 s, not saved yet
    # a reset (crash, watchdog, power): the next boot goes on from what was saved, not from zero
    B.boot()
    t = T.open_trial(BOARD, 50000, print, r)
    assert t.spent == T.SAVE_MS and B.state()["boots"] == 2
    assert not t.tick(50000 + 9999)
    assert t.tick(50000 + 10000)                       # 10 + 10 s = the 20 s deadline
    t.expire(50000 + 10000)
    assert r.notes == ["trial"]
    st = B.state()
    assert st["state"] == "rollback" and "20 s deadline" in st["error"] and st["trial_ms"] == 20000
    B.boot()                                           # the reset: otaboot puts the previous set back
    st = B.state()
    assert st["state"] == "rolled_back" and "was not confirmed within its 20 s deadline" in st["error"]
    assert read("lib/satellite/app.mpy") == old["satellite/app.mpy"]
    assert read(B.BAD + "/satellite/app.mpy") == new["satellite/app.mpy"]
    assert B.boot_record()["rollbacks"] == 1


def test_an_expired_image_trial_is_marked_for_the_report_and_reset():
    fresh()
    B.set_state({"state": "image_trial", "version": "2.0", "from": "ota_0", "to": "ota_1", "boots": 1})
    r = Resets()
    t = T.Trial(B.state(), 3000, 20000, 0, print, r)
    assert t.tick(20000)
    t.expire(20000)
    st = B.state()
    assert r.notes == ["trial"] and st["state"] == "image_trial" and st["expired"] is True
    assert "deadline" in st["error"]


def test_tick_allocates_nothing_between_saves():
    on_trial()
    t = T.open_trial(BOARD, 0, print, Resets())
    t.tick(1)

    def ticks():
        i = 0
        while i < 200:
            t.tick(i)
            t.proven(i, 1)
            i += 1

    assert mem_alloc_delta(ticks) in (None, 0)            # None: CPython has no gc.mem_alloc


def test_zz_back_home():
    import test_ota
    os.chdir(test_ota._HOME)
