# dual: cpython micropython
# The board side of over-the-air updates without a network: otaboot's boot-time states (swap, trial, rollback,
# a swap cut between its renames, a stage spoiled after it was verified), crash counting, and satellite.ota's
# HTTP/1.0 parser, manifest checks and Updater against a fake socket (docs/ota.md).
import os
import json

import asyncio

from mpsupport import raises, scratch
import otaboot as B
from satellite import ota as O
from satellite import otahttp as H

_n = [0]
_HOME = os.getcwd()


def fresh():
    """A new empty flash directory as the working directory (otaboot's paths are relative, like on a board)."""
    os.chdir(_HOME)
    _n[0] += 1
    root = scratch("ota")
    B.rmtree(root)
    os.mkdir(root)
    os.chdir(root)
    return root


def sha(data):
    import hashlib
    return "".join("%02x" % x for x in hashlib.sha256(data).digest())


def files_of(tag):
    return {"satellite/__init__.mpy": b"init " + tag, "satellite/app.mpy": b"app " + tag * 40,
            "satellite/runtime.mpy": b"runtime " + tag * 300}


def manifest(files, version="9.9.9", mpy=None):
    m = {"format": 1, "package": "satellite", "version": version, "march": "x64",
         "mpy": mpy if mpy is not None else _mpy(),
         "files": [{"path": p, "size": len(files[p]), "sha256": sha(files[p])} for p in sorted(files)]}
    return json.dumps(m).encode()


def _mpy():
    import sys
    return getattr(sys.implementation, "_mpy", 6 | (3 << 8) | (2 << 10))


def write_set(root, files, man):
    for p, data in files.items():
        B.mkdirs((root + "/" + p).rpartition("/")[0])
        with open(root + "/" + p, "wb") as f:
            f.write(data)
    with open(root + "/satellite/" + B.MANIFEST, "wb") as f:
        f.write(man)


def read(p):
    with open(p, "rb") as f:
        return f.read()


def installed_old_and_staged_new():
    fresh()
    old, new = files_of(b"old"), files_of(b"new")
    write_set("lib", old, manifest(old, "1.0"))
    write_set(B.STAGE, new, manifest(new, "2.0"))
    B.set_state({"state": "pending", "version": "2.0"})
    return old, new


def test_pending_stage_is_swapped_in_and_a_trial_that_never_reaches_a_session_is_rolled_back():
    old, new = installed_old_and_staged_new()
    B.boot()
    assert read("lib/satellite/app.mpy") == new["satellite/app.mpy"]
    assert read(B.PREV + "/satellite/app.mpy") == old["satellite/app.mpy"]
    assert B.state()["state"] == "trial" and B.state()["boots"] == 1 and not B.exists(B.STAGE)
    B.boot()
    B.boot()
    assert B.state()["state"] == "trial" and B.state()["boots"] == B.BOOT_BUDGET
    B.boot()                                      # one boot past the budget without confirm(): rollback
    st = B.state()
    assert st["state"] == "rolled_back" and "within %d boots" % B.BOOT_BUDGET in st["error"]
    assert read("lib/satellite/app.mpy") == old["satellite/app.mpy"]
    assert read(B.BAD + "/satellite/app.mpy") == new["satellite/app.mpy"] and not B.exists(B.PREV)
    assert B.boot_record()["boots"] == 4
    B.boot()                                      # rolled_back is a resting state
    assert read("lib/satellite/app.mpy") == old["satellite/app.mpy"]


def test_confirm_makes_the_trial_the_firmware_and_frees_the_previous_set():
    old, new = installed_old_and_staged_new()
    B.boot()
    assert B.confirm() is True
    assert B.state()["state"] == "ok" and not B.exists(B.PREV)
    for _ in range(B.BOOT_BUDGET + 2):
        B.boot()
    assert read("lib/satellite/app.mpy") == new["satellite/app.mpy"]
    assert B.confirm() is False                   # nothing on trial: nothing to confirm


def test_a_stage_spoiled_after_verification_is_refused_at_boot_and_the_running_set_kept():
    old, new = installed_old_and_staged_new()
    with open(B.STAGE + "/satellite/runtime.mpy", "wb") as f:
        f.write(b"flipped bits")
    B.boot()
    st = B.state()
    assert st["state"] == "refused" and "runtime.mpy" in st["error"]
    assert read("lib/satellite/runtime.mpy") == old["satellite/runtime.mpy"] and not B.exists(B.STAGE)


def test_a_swap_cut_between_its_renames_is_finished_at_the_next_boot():
    old, new = installed_old_and_staged_new()
    B.set_state({"state": "swap", "version": "2.0"})
    B.mkdirs(B.PREV)
    os.rename("lib/satellite", B.PREV + "/satellite")     # power cut here: no lib/satellite at all
    B.boot()
    assert read("lib/satellite/app.mpy") == new["satellite/app.mpy"]
    assert read(B.PREV + "/satellite/app.mpy") == old["satellite/app.mpy"]
    assert B.state()["state"] == "trial"


def test_a_rollback_cut_between_its_renames_is_finished_at_the_next_boot():
    old, new = installed_old_and_staged_new()
    B.boot()
    B.set_state({"state": "rollback", "version": "2.0", "error": "test"})
    B.mkdirs(B.BAD)
    os.rename("lib/satellite", B.BAD + "/satellite")      # power cut mid-rollback
    B.boot()
    assert read("lib/satellite/app.mpy") == old["satellite/app.mpy"] and B.state()["state"] == "rolled_back"


def test_a_half_downloaded_stage_is_garbage_at_boot():
    fresh()
    old = files_of(b"old")
    write_set("lib", old, manifest(old, "1.0"))
    B.mkdirs(B.STAGE + "/satellite")
    with open(B.STAGE + "/satellite/app.mpy", "wb") as f:
        f.write(b"half")
    B.boot()                                      # never marked pending
    assert not B.exists(B.STAGE) and read("lib/satellite/app.mpy") == old["satellite/app.mpy"]


def test_crash_is_counted_and_only_a_trial_resets():
    fresh()
    resets = []
    real = B.reset
    B.reset = lambda note="": resets.append(note)
    try:
        B.crashed(ValueError("boom"))
        assert resets == [] and B.boot_record()["crashes"] == 1 and "boom" in B.boot_record()["last_crash"]
        B.set_state({"state": "trial", "boots": 1, "version": "2.0"})
        B.crashed(RuntimeError("broken"))
        assert resets == ["crash"] and B.boot_record()["crashes"] == 2
    finally:
        B.reset = real
    B.write_json(B.BOOTREC, dict(B.boot_record(), reset_request="crash"))
    B.boot()
    assert B.boot_record()["reset_note"] == "crash"      # the next boot knows why it happened


# ---------------------------------------------------------------------------------------------- HTTP

RESP = b"HTTP/1.0 200 OK\r\nServer: x\r\nContent-Length: 5\r\n\r\nhello"


def test_http_head_whole_byte_at_a_time_and_with_the_body_behind_it():
    h = O.HttpHead()
    off = h.feed(RESP, len(RESP))
    assert h.status == 200 and h.length == 5 and RESP[off:] == b"hello"
    h = O.HttpHead()
    offs = [h.feed(RESP[i:i + 1], 1) for i in range(len(RESP))]
    first = [i for i, o in enumerate(offs) if o >= 0][0]
    assert first == RESP.index(b"\r\n\r\n") + 3 and offs[first] == 1 and h.length == 5


def test_http_head_refusals():
    e = raises(O.OtaError, O.HttpHead().feed, b"SSH-2.0\r\n\r\n", 11)
    assert e.reason == "BAD_HTTP"
    big = b"HTTP/1.0 200 OK\r\nX: " + b"a" * H.MAX_HEAD
    e = raises(O.OtaError, O.HttpHead().feed, big, len(big))
    assert e.reason == "BAD_HTTP"
    bad = b"HTTP/1.0 200 OK\r\nContent-Length: -3\r\n\r\n"
    assert raises(O.OtaError, O.HttpHead().feed, bad, len(bad)).reason == "BAD_HTTP"


def test_parse_url():
    assert O.parse_url("http://10.0.0.2:8080/a/manifest.json") == ("10.0.0.2", 8080, "/a/manifest.json")
    assert O.parse_url("http://core.local") == ("core.local", 80, "/")
    for bad in ("https://x/m", "ftp://x", "http://:80/x", "http://x:99999/m", "http://x/" + "a" * H.MAX_URL, 5):
        assert raises(O.OtaError, O.parse_url, bad).code == O.INVALID_REQUEST


def test_check_manifest_limits():
    files = files_of(b"x")
    assert O.check_manifest(manifest(files), _mpy())["version"] == "9.9.9"
    assert raises(O.OtaError, O.check_manifest, b"{not json", _mpy()).reason == "BAD_MANIFEST"
    other = _mpy() ^ (1 << 10)
    assert raises(O.OtaError, O.check_manifest, manifest(files, mpy=other), _mpy()).reason == "WRONG_MPY"

    def with_entry(path, size=3, h=None):
        m = json.loads(manifest(files))
        m["files"].append({"path": path, "size": size, "sha256": h or sha(b"abc")})
        return json.dumps(m).encode()

    for path in ("satellite/../boot.py", "/satellite/x.mpy", "main.py", "satellite/app.mpy", "satellite/_manifest.json"):
        assert raises(O.OtaError, O.check_manifest, with_entry(path), _mpy()).reason == "BAD_PATH", path
    assert raises(O.OtaError, O.check_manifest, with_entry("satellite/big.mpy", O.MAX_FILE + 1),
                  _mpy()).reason == "TOO_LARGE"
    assert raises(O.OtaError, O.check_manifest, with_entry("satellite/h.mpy", 3, "AB" * 32),
                  _mpy()).reason == "BAD_MANIFEST"
    m = json.loads(manifest(files))
    m["files"] = [{"path": "satellite/f%d.mpy" % i, "size": 1, "sha256": sha(b"a")} for i in range(O.MAX_FILES + 1)]
    assert raises(O.OtaError, O.check_manifest, json.dumps(m).encode(), _mpy()).reason == "BAD_MANIFEST"
    del files["satellite/app.mpy"]
    e = raises(O.OtaError, O.check_manifest, manifest(files), _mpy())
    assert e.reason == "BAD_MANIFEST" and "app.mpy" in str(e)


class FakeSock:
    """A server socket seen from the board: answers the GET it is written with from `site`
    {path: (declared Content-Length, bytes sent)}, 7 bytes per read (many reads per chunk)."""

    def __init__(self, site, log):
        self.site, self.log = site, log
        self.out = b""
        self.req = b""

    def write(self, b):
        self.req += bytes(b)
        if b"\r\n\r\n" in self.req:
            path = self.req.split(b" ")[1].decode()
            self.log.append(path)
            if path in self.site:
                n, body = self.site[path]
                self.out = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % n + body
            else:
                self.out = b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n"
        return len(b)

    def readinto(self, buf):
        n = min(7, len(self.out), len(buf))
        buf[:n] = self.out[:n]
        self.out = self.out[n:]
        return n

    def close(self):
        pass


def site_for(files, man, cut=None, spoil=None):
    s = {"/fw/manifest.json": (len(man), man)}
    for p, data in files.items():
        body = data
        if p == cut:
            body = data[:len(data) // 2]
        if p == spoil:
            body = bytes(len(data))
        s["/fw/" + p] = (len(data), body)
    return s


def run_update(site, pin, free=10 ** 7, image=False, board=None):
    log = []

    async def connect(host, port):
        assert (host, port) == ("10.0.0.2", 8080)
        return FakeSock(site, log)

    up = O.Updater(connect, free=lambda: free, mpy=_mpy(), log=lambda line: None, image=image, board=board)

    async def go():
        return await up.update("http://10.0.0.2:8080/fw/manifest.json", pin)

    try:
        return asyncio.run(go()), log
    except O.OtaError as e:
        return e, log


def start_installed():
    fresh()
    old = files_of(b"old")
    write_set("lib", old, manifest(old, "1.0"))
    return old


def test_updater_downloads_verifies_and_stages_a_pending_set():
    start_installed()
    new = files_of(b"new")
    man = manifest(new, "2.0")
    res, log = run_update(site_for(new, man), sha(man))
    assert res == {"staged": "2.0", "digest": sha(man), "files": 3, "bytes": sum(len(b) for b in new.values())}
    assert log[0] == "/fw/manifest.json" and len(log) == 4
    for p, data in new.items():
        assert read(B.STAGE + "/" + p) == data
    assert read(B.STAGE + "/satellite/" + B.MANIFEST) == man
    st = B.state()
    assert st["state"] == "pending" and st["digest"] == sha(man) and st["from"] == O.running_digest()
    assert B.running_manifest()[1] == "1.0"


def test_updater_refusals_leave_the_running_set_and_no_stage():
    old = start_installed()
    new = files_of(b"new")
    man = manifest(new, "2.0")
    cases = (
        (site_for(new, man), "0" * 64, 10 ** 7, O.INVALID_REQUEST, "DIGEST_MISMATCH", 1),   # manifest not the pin
        (site_for(new, man, spoil="satellite/runtime.mpy"), sha(man), 10 ** 7, O.INVALID_REQUEST, "DIGEST_MISMATCH", 4),
        (site_for(new, man, cut="satellite/runtime.mpy"), sha(man), 10 ** 7, O.UNAVAILABLE, "CUT", 4),
        (site_for(new, man), sha(man), 4096, O.RESOURCE_EXHAUSTED, "FLASH_FULL", 1),          # before any file
        ({}, sha(man), 10 ** 7, O.UNAVAILABLE, "HTTP_404", 1),
    )
    for site, pin, free, code, reason, nreq in cases:
        e, log = run_update(site, pin, free)
        assert isinstance(e, O.OtaError) and (e.code, e.reason) == (code, reason), (reason, e)
        assert len(log) == nreq, (reason, log)
        assert not B.exists(B.STAGE) and B.state().get("state", "ok") == "ok", reason
        assert read("lib/satellite/runtime.mpy") == old["satellite/runtime.mpy"]
    e, _ = run_update(site_for(new, man), "not-a-digest")
    assert e.reason == "BAD_ARGUMENTS"
    B.set_state({"state": "trial", "boots": 1, "version": "2.0"})
    e, log = run_update(site_for(new, man), sha(man))
    assert e.reason == "BUSY" and log == [] and "2.0 is on trial until a session proves it" in str(e)
    B.set_state({"state": "pending", "version": "2.0"})
    e, log = run_update(site_for(new, man), sha(man))
    assert e.reason == "BUSY" and log == [] and "reboot the board first" in str(e)


def _update_failing_mid_set(exc):
    """An update whose socket raises exc when the second file is read (the manifest and one file staged);
    returns (the OtaError raised, whether the first file was staged then). Checks the stage is removed, the
    state untouched, the updater free again and the running set kept."""
    old = start_installed()
    new = files_of(b"new")
    man = manifest(new, "2.0")
    site, log, staged = site_for(new, man), [], []

    class Failing(FakeSock):
        def readinto(self, buf):
            if len(log) == 3:
                staged.append(B.exists(B.STAGE + "/" + sorted(new)[0]))
                raise exc
            return FakeSock.readinto(self, buf)

    async def connect(host, port):
        return Failing(site, log)

    up = O.Updater(connect, free=lambda: 10 ** 7, mpy=_mpy(), log=lambda line: None)
    e = raises(O.OtaError, asyncio.run, up.update("http://10.0.0.2:8080/fw/manifest.json", sha(man)))
    assert not B.exists(B.STAGE) and B.state().get("state", "ok") == "ok" and not up.busy
    assert read("lib/satellite/runtime.mpy") == old["satellite/runtime.mpy"]
    return e, staged == [True]


def test_r10_8_a_updater_out_of_memory_is_a_typed_refusal_with_no_stage_left():
    """A MemoryError mid-update (here: reading the second file, after the manifest and one file are staged)
    becomes OtaError RESOURCE_EXHAUSTED/NO_MEMORY, so the Invoke still gets its Error terminal (R10.8-a); the
    stage is removed and the running set kept."""
    e, staged = _update_failing_mid_set(MemoryError("memory allocation failed, allocating 4096 bytes"))
    assert (e.code, e.reason) == (O.RESOURCE_EXHAUSTED, "NO_MEMORY") and staged


def test_r10_8_a_updater_out_of_memory_while_connecting_is_no_memory_not_connect():
    """A MemoryError from connect (no room for the socket or its buffers: the small frozen devkit heap) is
    RESOURCE_EXHAUSTED/NO_MEMORY, like one mid-set, not UNAVAILABLE/CONNECT, which would send the user to
    look for a server that is there; nothing is staged."""
    start_installed()

    async def connect(host, port):
        raise MemoryError("memory allocation failed, allocating 1460 bytes")

    up = O.Updater(connect, free=lambda: 10 ** 7, mpy=_mpy(), log=lambda line: None)
    e = raises(O.OtaError, asyncio.run, up.update("http://10.0.0.2:8080/fw/manifest.json", "0" * 64))
    assert (e.code, e.reason) == (O.RESOURCE_EXHAUSTED, "NO_MEMORY"), (e.code, e.reason)
    assert not B.exists(B.STAGE) and B.state().get("state", "ok") == "ok" and not up.busy


def test_r10_8_a_updater_unexpected_failure_is_internal_error_with_no_stage_left():
    """Any other exception mid-update (a bug, a driver's odd error) becomes OtaError INTERNAL_ERROR/INTERNAL:
    the Invoke still gets its Error terminal (R10.8-a) instead of a task that dies, and no stage is left."""
    e, staged = _update_failing_mid_set(KeyError("a driver bug"))
    assert (e.code, e.reason) == (O.INTERNAL_ERROR, "INTERNAL") and "a driver bug" in str(e) and staged


def test_zz_back_home():
    os.chdir(_HOME)
