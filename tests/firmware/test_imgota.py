# dual: cpython micropython
# Image OTA without a network or a chip (docs/ota.md, "Image OTA"): the simulated esp32.Partition and the
# ESP-IDF bootloader rule (host/alabama/board/simchip/esp32.py: NOR writes, otadata, NEW -> PENDING_VERIFY ->
# VALID, or ABORTED at a reset before confirmation), satellite.imgota writing an image into the next slot
# against a fake HTTP server (test_ota.FakeSock), and otaboot's image states. Runs on CPython and both
# micropython builds.
import os
import sys
import json

import asyncio

from mpsupport import raises
import otaboot as B
from satellite import ota as O
from satellite import imgota as I
from test_ota import fresh, run_update, sha

_here = __file__.rpartition("/")[0] or "."
sys.path.append(_here + "/../../host/alabama/board/simchip")
import esp32 as E                      # noqa: E402 - the simulated module, as the virtual board runs it

SLOT = 16 * 4096


def setenv(k, v):
    if hasattr(os, "environ"):
        os.environ[k] = v
    else:
        os.putenv(k, v)


def chip(running="ota_0"):
    """A fresh flash dir (cwd) with a blank simulated chip in it, running `running`."""
    root = fresh()
    d = root + "/chip"
    os.mkdir(d)
    E.blank(d, SLOT)
    setenv("ALABAMA_SIM_CHIP", d)
    setenv("ALABAMA_SIM_RUNNING", running)
    return d


def app(tag, n=9000):
    return E.pack_image((tag * (n // len(tag) + 1))[:n])


def flash(d, label, data):
    with open(E.path_of(d, label), "r+b") as f:
        f.write(data)


def slot_bytes(d, label, n):
    with open(E.path_of(d, label), "rb") as f:
        return f.read(n)


def test_partition_is_nor_flash_and_knows_the_table():
    d = chip()
    p = E.Partition(E.Partition.RUNNING)
    assert p.info()[4] == "ota_0" and p.info()[3] == SLOT and p.get_next_update().info()[4] == "ota_1"
    assert p.ioctl(4, 0) == SLOT // 4096 and p.ioctl(5, 0) == 4096
    n = p.get_next_update()
    n.writeblocks(0, b"\x0f" * 8, 0)
    n.writeblocks(0, b"\xf0" * 8, 0)                 # no erase between: bits only clear
    assert slot_bytes(d, "ota_1", 8) == bytes(8)
    assert n.ioctl(6, 0) == 0 and slot_bytes(d, "ota_1", 8) == b"\xff" * 8
    n.writeblocks(1, b"abc")                          # the simple protocol erases first
    buf = bytearray(3)
    n.readblocks(1, buf)
    assert bytes(buf) == b"abc"
    assert raises(OSError, n.readblocks, SLOT // 4096, buf).args[0] == -E.ESP_ERR_INVALID_SIZE


def test_bootloader_boots_new_once_and_rolls_back_an_unconfirmed_image():
    d = chip()
    flash(d, "ota_0", app(b"old"))
    assert E.select_boot(d) == "ota_0"                # blank otadata: the first OTA slot
    nxt = E.Partition("ota_1")
    assert raises(OSError, nxt.set_boot).args[0] == -E.ESP_ERR_OTA_VALIDATE_FAILED   # no image there yet
    flash(d, "ota_1", app(b"new"))
    nxt.set_boot()
    assert E.select_boot(d) == "ota_1"                # NEW -> PENDING_VERIFY, booted
    assert [e[1] for e in E.entries(d) if e[2]] == [E.PENDING_VERIFY]
    assert E.select_boot(d) == "ota_0"                # reset before confirmation: ABORTED, the old slot
    assert [e[1] for e in E.entries(d) if e[2]] == [E.ABORTED]
    E.Partition("ota_1").set_boot()                   # again, and this time confirmed
    assert E.select_boot(d) == "ota_1"
    setenv("ALABAMA_SIM_RUNNING", "ota_1")
    E.Partition.mark_app_valid_cancel_rollback()
    assert E.select_boot(d) == "ota_1" and E.select_boot(d) == "ota_1"
    es = E.entries(d)
    top = es[E.active(es)]
    assert E.slot_of(top[0]) == "ota_1" and top[1] == E.VALID
    E.Partition("ota_0").set_boot()                   # the new entry goes into the other sector
    es2 = E.entries(d)
    assert E.active(es2) != E.active(es) and E.slot_of(es2[E.active(es2)][0]) == "ota_0"


def image_manifest(data, offset=0, size=None, version="2.0", board=None):
    body = data[offset:]
    m = {"format": 1, "kind": "image", "version": version, "file": "firmware.bin", "offset": offset,
         "size": len(body) if size is None else size, "sha256": sha(body), "firmware_digest": "ab" * 32}
    if board is not None:
        m["board"] = board
    return json.dumps(m).encode()


def run_image(site, pin):
    return run_update(site, pin, image=True)


def test_an_image_is_streamed_into_the_next_slot_verified_and_set_to_boot():
    d = chip()
    flash(d, "ota_0", app(b"old"))
    new = app(b"new", 3 * 4096 + 100)                 # not a whole number of sectors
    merged = b"\xe9" * 700 + new                      # a merged firmware.bin: the app after a prefix
    man = image_manifest(merged, offset=700)
    res, log = run_image({"/fw/manifest.json": (len(man), man), "/fw/firmware.bin": (len(merged), merged)}, sha(man))
    assert res == {"staged": "2.0", "digest": sha(man), "slot": "ota_1", "bytes": len(new)}, res
    assert log == ["/fw/manifest.json", "/fw/firmware.bin"]
    assert slot_bytes(d, "ota_1", len(new)) == new
    st = B.state()
    assert st["state"] == "image_pending" and (st["from"], st["to"]) == ("ota_0", "ota_1")
    assert E.select_boot(d) == "ota_1"


def test_image_refusals_write_nothing_or_never_set_boot():
    d = chip()
    flash(d, "ota_0", app(b"old"))
    new = app(b"new", 2 * 4096)
    man = image_manifest(new)
    good = {"/fw/manifest.json": (len(man), man), "/fw/firmware.bin": (len(new), new)}
    big = image_manifest(new, size=SLOT + 1)
    spoiled = new[:-1] + b"\x00"
    cases = (
        (good, "0" * 64, O.INVALID_REQUEST, "DIGEST_MISMATCH", 1),
        ({"/fw/manifest.json": (len(man), man), "/fw/firmware.bin": (len(new), spoiled)}, sha(man),
         O.INVALID_REQUEST, "DIGEST_MISMATCH", 2),
        ({"/fw/manifest.json": (len(man), man), "/fw/firmware.bin": (len(new), new[:5000])}, sha(man),
         O.UNAVAILABLE, "CUT", 2),
        ({"/fw/manifest.json": (len(big), big)}, sha(big), O.RESOURCE_EXHAUSTED, "TOO_LARGE", 1),
    )
    for site, pin, code, reason, nreq in cases:
        e, log = run_image(site, pin)
        assert isinstance(e, O.OtaError) and (e.code, e.reason) == (code, reason), (reason, e)
        assert len(log) == nreq, (reason, log)
        assert B.state().get("state", "ok") == "ok" and reason in B.boot_record()["last_update"]
        assert E.select_boot(d) == "ota_0"            # otadata untouched: the old image boots
    assert slot_bytes(d, "ota_1", 4096) != b"\xff" * 4096      # the cut/spoiled slot is garbage, never booted
    s = json.dumps({"format": 1, "package": "satellite", "version": "2", "files": []}).encode()
    e, log = run_image({"/fw/manifest.json": (len(s), s)}, sha(s))
    assert (e.code, e.reason) == (O.INVALID_REQUEST, "WRONG_KIND") and "frozen image" in str(e)


def test_an_image_for_another_board_is_refused_before_anything_is_written():
    d = chip()
    flash(d, "ota_0", app(b"old"))
    new = app(b"new")
    for board, reason in (("esp32-s3-box-3", "WRONG_BOARD"), (None, "BAD_MANIFEST")):
        man = image_manifest(new, board=board)
        e, log = run_update({"/fw/manifest.json": (len(man), man), "/fw/firmware.bin": (len(new), new)}, sha(man),
                            image=True, board="sim")
        assert (e.code, e.reason) == (O.INVALID_REQUEST, reason), (board, e)
        assert log == ["/fw/manifest.json"]                          # firmware.bin never fetched
        assert slot_bytes(d, "ota_1", 4096) == b"\xff" * 4096 and B.state().get("state", "ok") == "ok"
    assert "for board esp32-s3-box-3, this board is sim" in str(raises(
        O.OtaError, I.check_manifest, json.loads(image_manifest(new, board="esp32-s3-box-3")), "sim"))
    man = image_manifest(new, board="sim")                           # its own board: written
    res, log = run_update({"/fw/manifest.json": (len(man), man), "/fw/firmware.bin": (len(new), new)}, sha(man),
                          image=True, board="sim")
    assert res["slot"] == "ota_1" and slot_bytes(d, "ota_1", len(new)) == new


def test_image_manifest_checks():
    m = json.loads(image_manifest(b"x" * 10))
    assert I.check_manifest(dict(m)) is not None
    for k, v, reason in (("file", "../boot.py", "BAD_PATH"), ("file", "a/b", "BAD_PATH"),
                         ("size", I.MAX_IMAGE + 1, "TOO_LARGE"), ("size", 0, "TOO_LARGE"),
                         ("sha256", "AB" * 32, "BAD_MANIFEST"), ("format", 2, "BAD_MANIFEST"),
                         ("offset", -1, "BAD_MANIFEST")):
        assert raises(O.OtaError, I.check_manifest, dict(m, **{k: v})).reason == reason, k


def test_otaboot_follows_the_image_through_trial_confirmation_and_rollback():
    d = chip()
    flash(d, "ota_0", app(b"old"))
    flash(d, "ota_1", app(b"new"))
    B.set_state({"state": "image_pending", "version": "2.0", "from": "ota_0", "to": "ota_1"})
    setenv("ALABAMA_SIM_RUNNING", "ota_0")            # set_boot never happened: still the old slot
    B.boot()
    assert B.state()["state"] == "refused" and "never booted" in B.state()["error"]
    B.set_state({"state": "image_pending", "version": "2.0", "from": "ota_0", "to": "ota_1"})
    E.Partition("ota_1").set_boot()
    setenv("ALABAMA_SIM_RUNNING", E.select_boot(d))
    B.boot()
    assert B.state()["state"] == "image_trial"
    setenv("ALABAMA_SIM_RUNNING", E.select_boot(d))   # a reset before any session: the bootloader rolls back
    B.boot()
    st = B.state()
    assert st["state"] == "rolled_back" and "was not confirmed by a session" in st["error"]
    assert B.boot_record()["rollbacks"] == 1
    B.set_state({"state": "image_pending", "version": "2.1", "from": "ota_0", "to": "ota_1"})
    E.Partition("ota_1").set_boot()
    setenv("ALABAMA_SIM_RUNNING", E.select_boot(d))
    B.boot()
    assert B.confirm() is True and B.state()["state"] == "ok"
    assert E.select_boot(d) == "ota_1" and B.boot_record()["rollbacks"] == 1
    B.boot()
    assert B.state()["state"] == "ok"


def test_otaboot_reports_a_first_boot_cut_before_it_ran_as_the_bootloader_saw_it():
    """set_boot happened, the new image's first boot was cut before otaboot ran (the bootloader had marked it
    PENDING_VERIFY), the next boot's bootloader ABORTED it and booted the old slot: a rollback, counted, not
    "never booted". A slot the bootloader would not verify (INVALID) is a refusal that says so."""
    d = chip()
    flash(d, "ota_0", app(b"old"))
    flash(d, "ota_1", app(b"new"))
    B.set_state({"state": "image_pending", "version": "2.0", "from": "ota_0", "to": "ota_1"})
    E.Partition("ota_1").set_boot()
    assert E.select_boot(d) == "ota_1"                # NEW -> PENDING_VERIFY; cut before boot.py ran otaboot
    setenv("ALABAMA_SIM_RUNNING", E.select_boot(d))   # the next boot: ABORTED, the old slot
    assert B.otadata_verdict("ota_1") == E.ABORTED
    B.boot()
    st = B.state()
    assert st["state"] == "rolled_back" and "PENDING_VERIFY" in st["error"] and "ABORTED" in st["error"], st
    assert "never booted" not in st["error"] and B.boot_record()["rollbacks"] == 1
    # the bootloader refused the image (it does not verify): INVALID, a refusal
    B.set_state({"state": "image_pending", "version": "2.1", "from": "ota_0", "to": "ota_1"})
    E.Partition("ota_1").set_boot()
    flash(d, "ota_1", b"\x00" * 64)                  # spoiled after set_boot
    setenv("ALABAMA_SIM_RUNNING", E.select_boot(d))
    assert B.otadata_verdict("ota_1") == 3
    B.boot()
    st = B.state()
    assert st["state"] == "refused" and "INVALID" in st["error"] and B.boot_record()["rollbacks"] == 1


def test_an_expired_image_the_bootloader_boots_again_is_sent_back_to_the_previous_slot():
    """A bootloader without app rollback boots the expired image again: otaboot sets the previous slot to boot and
    resets, and the boot after that reports the rollback with the deadline's reason."""
    d = chip()
    flash(d, "ota_0", app(b"old"))
    flash(d, "ota_1", app(b"new"))
    resets = []
    real, B.reset = B.reset, resets.append
    try:
        B.set_state({"state": "image_trial", "version": "2.0", "from": "ota_0", "to": "ota_1", "boots": 1,
                     "expired": True, "error": "was not confirmed within its 20 s deadline (...)"})
        setenv("ALABAMA_SIM_RUNNING", "ota_1")
        B.boot()
        assert resets == ["trial"] and E.select_boot(d) == "ota_0"     # the previous slot is set to boot
        setenv("ALABAMA_SIM_RUNNING", "ota_0")
        B.boot()
        st = B.state()
        assert st["state"] == "rolled_back" and "20 s deadline" in st["error"] and "expired" not in st
    finally:
        B.reset = real


def test_zz_back_home():
    os.chdir(__import__("test_ota")._HOME)
