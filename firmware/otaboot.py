# The boot half of over-the-air updates (boot.py calls boot(), main.py calls crashed()): it swaps a staged,
# verified firmware set in at boot, counts the boots of a trial set, and rolls back to the previous set when
# the trial is not confirmed within BOOT_BUDGET boots (or within its deadline: satellite.trial times it, marks
# the state `rollback` and resets). It is deliberately OUTSIDE the package it
# swaps (lib/otaboot.mpy, never in lib/satellite/), so a broken update cannot break its own rollback; like
# boot.py, main.py and the MicroPython image it is updated by `alabama deploy` (USB) only, never over the air.
# It imports nothing from satellite, does no networking and allocates only at boot.
#
# Flash layout (paths relative to the working directory: "/" on a board, the flash dir on the virtual board)
#   lib/satellite/            the running set (lib/satellite/_manifest.json names its version and digests)
#   ota/stage/satellite/      a downloaded set (satellite.ota writes it; complete only once state = pending)
#   ota/prev/satellite/       the set a trial replaced: the rollback target, removed when the trial succeeds
#   ota/bad/satellite/        the last set rolled back (kept for a post-mortem, replaced by the next one)
#   ota/state.json            {"state": ..., "version", "digest", "boots", "error"}; written atomically
#   ota/boot.json             boots, crashes, last crash, the reset this code asked for (health reads it)
#
# States (one table; a state missing from it is treated as "ok"):
#   ok        nothing to do
#   pending   a complete, verified stage: swap it in on this boot (stage verified again first) -> trial
#   swap      the swap is under way (a power cut mid-swap resumes it, each step is one rename) -> trial
#   trial     the new set runs; every boot counts (a watchdog reset too); a session that stays healthy for the
#             confirmation window confirms it (satellite.trial -> confirm() -> ok, prev removed);
#             past BOOT_BUDGET boots, or past its deadline (satellite.trial.expire) -> rollback
#   rollback  putting prev back (resumable like swap) -> rolled_back
#   rolled_back  the previous set runs again; the state records why (health and device.info show it)
# and for an app image (a frozen image updated by satellite.imgota; the slots and otadata belong to ESP-IDF's
# bootloader, which boots the new slot once and rolls it back by itself at a reset before it is confirmed):
#   image_pending  the new slot is written, verified and set to boot (or about to be): at this boot, running
#                  the new slot -> image_trial; running the old one -> what otadata says happened: the new
#                  image's entry ABORTED (it booted PENDING_VERIFY and was reset before otaboot ran) ->
#                  rolled_back; INVALID -> refused (the bootloader would not boot it); none -> refused (set_boot
#                  never completed)
#   image_trial    the new image runs until a session proves it (satellite.trial -> confirm(): the bootloader's
#                  mark_app_valid_cancel_rollback -> ok); booting the old slot in this state means the
#                  bootloader rolled it back (a reset before that: crash, watchdog, power, or the trial's
#                  deadline) -> rolled_back, rollback counted
import json
import os
import sys

from micropython import const

LIB = "lib"
PKG = "satellite"
ACTIVE = "lib/satellite"
OTA = "ota"
STAGE = "ota/stage"
PREV = "ota/prev"
BAD = "ota/bad"
STATE = "ota/state.json"
BOOTREC = "ota/boot.json"
MANIFEST = "_manifest.json"        # inside a set: lib/satellite/_manifest.json
BOOT_BUDGET = const(3)             # boots a trial set gets to be confirmed in before it is rolled back
_MAX_JSON = const(16384)           # state, boot record, manifest (satellite.ota.MAX_MANIFEST); larger is corruption
_BLOCK = const(512)


def log(line):
    print("otaboot: " + line)


def exists(p):
    try:
        os.stat(p)
        return True
    except OSError:
        return False


def is_dir(p):
    try:
        return os.stat(p)[0] & 0x4000 != 0
    except OSError:
        return False


def rmtree(p):
    if not exists(p):
        return
    if is_dir(p):
        for name in os.listdir(p):
            rmtree(p + "/" + name)
        os.rmdir(p)
    else:
        os.remove(p)


def mkdirs(p):
    cur = ""
    for part in p.split("/"):
        cur = part if not cur else cur + "/" + part
        if not exists(cur):
            os.mkdir(cur)


def read_json(p):
    try:
        if os.stat(p)[6] > _MAX_JSON:
            return None
        with open(p) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def write_json(p, d):
    """Atomic replace (temporary file, then rename; FAT refuses to rename over a file: remove first)."""
    mkdirs(p.rpartition("/")[0])
    tmp = p + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(d))
    try:
        os.rename(tmp, p)
    except OSError:
        os.remove(p)
        os.rename(tmp, p)


def state():
    s = read_json(STATE)
    return s if isinstance(s, dict) else {"state": "ok"}


def set_state(d):
    write_json(STATE, d)


def boot_record():
    r = read_json(BOOTREC)
    return r if isinstance(r, dict) else {"boots": 0, "crashes": 0}


def _hex(b):
    return "".join("%02x" % x for x in b)


def file_sha256(p, buf=None):
    import hashlib
    h = hashlib.sha256()
    b = buf or bytearray(_BLOCK)
    mv = memoryview(b)
    with open(p, "rb") as f:
        while True:
            n = f.readinto(b)
            if not n:
                break
            h.update(mv[:n])
    return _hex(h.digest())


def verify_set(root):
    """Every file of the set under root (root/satellite/...) matches its manifest: None, or what is wrong."""
    m = read_json(root + "/" + PKG + "/" + MANIFEST)
    if not isinstance(m, dict) or not isinstance(m.get("files"), list):
        return "no readable manifest"
    buf = bytearray(_BLOCK)
    for e in m["files"]:
        p = root + "/" + e["path"]
        try:
            if os.stat(p)[6] != e["size"]:
                return "%s has the wrong size" % e["path"]
            if file_sha256(p, buf) != e["sha256"]:
                return "%s does not match its sha256" % e["path"]
        except OSError:
            return "%s is missing" % e["path"]
    return None


def _move(src, dst):
    """Rename src over dst (dst removed first); both are directories."""
    rmtree(dst)
    mkdirs(dst.rpartition("/")[0])
    os.rename(src, dst)


def _swap(st):
    # Resumable: each step is one rename, and the flash tells which steps are done.
    staged = STAGE + "/" + PKG
    if exists(staged):
        if exists(ACTIVE):
            _move(ACTIVE, PREV + "/" + PKG)
        mkdirs(LIB)
        os.rename(staged, ACTIVE)
    rmtree(STAGE)
    st["state"] = "trial"
    st["boots"] = 1                 # this boot is the trial's first
    set_state(st)
    log("firmware %s swapped in: trial boot 1 of %d (it has %d boots to prove itself in a session)" % (
        st.get("version"), BOOT_BUDGET, BOOT_BUDGET))


def _rollback(st):
    prev = PREV + "/" + PKG
    if exists(prev):
        if exists(ACTIVE):
            _move(ACTIVE, BAD + "/" + PKG)
        os.rename(prev, ACTIVE)
    rmtree(PREV)
    st["state"] = "rolled_back"
    set_state(st)
    note("rolled back %s: %s" % (st.get("version"), st.get("error")))
    log("ROLLED BACK: firmware %s %s; the previous firmware runs again" % (st.get("version"), st.get("error")))


def _on_pending(st):
    why = verify_set(STAGE)
    if why is not None:
        rmtree(STAGE)
        st["state"] = "refused"
        st["error"] = "staged set refused at boot: " + why
        set_state(st)
        log(st["error"] + "; the running firmware is kept")
        return
    st["state"] = "swap"
    set_state(st)
    _swap(st)


def running_slot():
    """The label of the running app partition ("ota_0", "ota_1", "factory"), None without esp32.Partition."""
    try:
        import esp32
        return esp32.Partition(esp32.Partition.RUNNING).info()[4]
    except (ImportError, OSError, ValueError, AttributeError):
        return None


def note(result):
    """The last update's outcome and the rollback count live in the boot record (device.info reads them)."""
    try:
        rec = boot_record()
        rec["last_update"] = result[:160]
        if result.startswith("rolled back"):
            rec["rollbacks"] = rec.get("rollbacks", 0) + 1
        write_json(BOOTREC, rec)
    except OSError:
        pass


_ABORTED = const(4)                # esp_ota_img_states_t (ESP-IDF esp_flash_partitions.h)
_INVALID = const(3)
_NO_SEQ = const(0xFFFFFFFF)


def otadata_verdict(to):
    """What the bootloader's otadata says of slot `to`'s newest entry when it is newer than every other slot's:
    its state (4 ABORTED: booted PENDING_VERIFY, reset before it was confirmed; 3 INVALID: refused), else None
    (set_boot never wrote one, or no readable otadata). Two esp_ota_select_entry_t {u32 ota_seq, 20 bytes
    seq_label, u32 ota_state, u32 crc}, one per 4 KB sector; an entry's slot is ota_((seq - 1) % 2)."""
    try:
        import esp32
        import struct
        part = esp32.Partition("otadata")
        buf = bytearray(32)
        best = {}
        for sector in (0, 1):
            part.readblocks(sector, buf)
            seq = struct.unpack_from("<I", buf, 0)[0]
            if seq == _NO_SEQ or seq == 0:
                continue
            slot = "ota_%d" % ((seq - 1) % 2)
            if slot not in best or seq > best[slot][0]:
                best[slot] = (seq, struct.unpack_from("<I", buf, 24)[0])
    except (ImportError, OSError, ValueError, AttributeError, TypeError):
        return None
    mine = best.get(to)
    if mine is None:
        return None
    for slot in best:
        if slot != to and best[slot][0] > mine[0]:
            return None
    return mine[1]


def _on_image_pending(st):
    run = running_slot()
    if run is None:
        return
    to = st.get("to")
    if run == to:
        st["state"] = "image_trial"
        st["boots"] = 1
        set_state(st)
        log("image %s boots from %s: on trial until a session proves it (a reset before that rolls it back)"
            % (st.get("version"), run))
        return
    verdict = otadata_verdict(to)
    if verdict == _ABORTED:
        st["state"] = "rolled_back"
        st["error"] = ("the new image in %s booted (the bootloader marked it PENDING_VERIFY) and was reset before "
                       "it started: the bootloader ABORTED it and booted %s again" % (to, run))
        set_state(st)
        note("rolled back %s: %s" % (st.get("version"), st["error"]))
        log("ROLLED BACK: image %s: %s" % (st.get("version"), st["error"]))
        return
    st["state"] = "refused"
    if verdict == _INVALID:
        st["error"] = "the bootloader refused the new image in %s (INVALID: it did not verify)" % to
    else:
        st["error"] = "the new image in %s never booted (the board was reset before set_boot completed)" % to
    set_state(st)
    note("refused: " + st["error"])
    log(st["error"] + "; %s runs" % run)


def _boot_previous(st):
    """An image whose trial expired booted again: the bootloader did not roll it back (one built without app
    rollback). Boot the previous slot explicitly (set_boot, then a reset); if even that fails, end the trial
    (state ok, said) rather than expire it again at every boot."""
    try:
        import esp32
        esp32.Partition(st.get("from")).set_boot()
    except (ImportError, OSError, ValueError, TypeError, AttributeError) as e:
        st.pop("expired", None)
        st["state"] = "ok"
        st["error"] = "its trial expired, but the bootloader boots it again and %s cannot be set to boot (%s): kept" % (
            st.get("from"), e)
        set_state(st)
        note("kept image %s: %s" % (st.get("version"), st["error"]))
        log("image %s %s" % (st.get("version"), st["error"]))
        return
    log("image %s: its trial expired and the bootloader booted it again: booting %s explicitly" % (
        st.get("version"), st.get("from")))
    reset("trial")


def _on_image_trial(st):
    run = running_slot()
    if run is not None and run == st.get("to") and st.get("expired"):
        _boot_previous(st)
        return
    if run is None or run == st.get("to"):
        st["boots"] = st.get("boots", 0) + 1
        set_state(st)
        return
    st["state"] = "rolled_back"
    if st.pop("expired", False):       # satellite.trial reset it at its deadline
        st["error"] = "the new image %s; the bootloader booted %s again" % (st.get("error"), run)
    else:
        st["error"] = ("the new image was not confirmed by a session before a reset: the bootloader booted %s again"
                       % run)
    set_state(st)
    note("rolled back %s: %s" % (st.get("version"), st["error"]))
    log("ROLLED BACK: image %s %s" % (st.get("version"), st["error"]))


def _on_trial(st):
    st["boots"] = st.get("boots", 0) + 1
    if st["boots"] > BOOT_BUDGET:
        st["state"] = "rollback"
        st["error"] = "was not confirmed by a session within %d boots" % BOOT_BUDGET
        set_state(st)
        _rollback(st)
        return
    set_state(st)
    log("trial boot %d of %d for firmware %s" % (st["boots"], BOOT_BUDGET, st.get("version")))


# What boot() does per state: the transition table.
_ON_BOOT = {"pending": _on_pending, "swap": _swap, "trial": _on_trial, "rollback": _rollback,
            "image_pending": _on_image_pending, "image_trial": _on_image_trial}


def boot():
    """Called by boot.py on every boot. Never raises: a failure here must not stop the board from booting."""
    try:
        rec = boot_record()
        rec["boots"] = rec.get("boots", 0) + 1
        rec["reset_note"] = rec.pop("reset_request", "")
        write_json(BOOTREC, rec)
        st = state()
        f = _ON_BOOT.get(st.get("state"))
        if f is not None:
            f(st)
        elif exists(STAGE):
            rmtree(STAGE)          # a download cut before it completed (never pending): the stage is garbage
    except Exception as e:  # noqa: BLE001 - the boot goes on with whatever set is in lib/satellite
        log("ERROR %s: %s (booting the installed firmware)" % (type(e).__name__, e))


def running_manifest():
    """(digest, version) of the set in lib/satellite (sha256 of its _manifest.json), ("", "") without one."""
    p = ACTIVE + "/" + MANIFEST
    try:
        digest = file_sha256(p)
    except OSError:
        return "", ""
    m = read_json(p)
    return digest, (m.get("version", "") if isinstance(m, dict) else "")


def status():
    """The update state for device.info: state, and version/error/boots when there are any."""
    st = state()
    out = {"state": st.get("state", "ok")}
    for k in ("version", "error", "boots"):
        if k in st:
            out[k] = st[k]
    return out


def _mark_valid():
    """ESP-IDF's rollback: the running app is good (OK on every boot, docs/library/esp32.rst)."""
    try:
        import esp32
        esp32.Partition.mark_app_valid_cancel_rollback()
        return True
    except (ImportError, OSError, AttributeError):     # no esp32 / OSError(-261): a bootloader without rollback
        return False


def confirm():
    """The running firmware proved itself in a session (satellite.trial): a trial set becomes the firmware (its
    predecessor is removed); on an app image the bootloader is told the image is good
    (mark_app_valid_cancel_rollback)."""
    st = state()
    if st.get("state") in ("image_trial", "image_pending") or running_slot() in ("ota_0", "ota_1"):
        _mark_valid()
        if st.get("state") == "image_trial":
            st["state"] = "ok"
            st["confirmed"] = True
            set_state(st)
            note("confirmed image %s" % st.get("version"))
            log("image %s confirmed (a session proved it)" % st.get("version"))
            return True
    if st.get("state") != "trial":
        return False
    rmtree(PREV)
    st["state"] = "ok"
    st["confirmed"] = True
    st.pop("error", None)
    set_state(st)
    log("firmware %s confirmed (a session proved it)" % st.get("version"))
    return True


def reset(note=""):
    """Reset the board; `note` is the reason the next boot's health report gives."""
    if note:
        try:
            rec = boot_record()
            rec["reset_request"] = note
            write_json(BOOTREC, rec)
        except OSError:
            pass
    try:
        sys.stdout.flush()
    except AttributeError:
        pass
    try:
        import machine
        machine.reset()             # the board: a hard reset (never returns)
    except (ImportError, AttributeError):
        pass
    # The virtual board (unix port, no machine.reset): end the interpreter; its supervisor boots it again
    # (the sh started by os.system has the interpreter as its parent).
    os.system("kill -9 $PPID")


def crashed(exc):
    """main.py: the firmware ended with an exception. Counted; a trial set is reset (so that its boot budget
    runs out and it is rolled back); an established set drops to the REPL as before (the caller re-raises)."""
    try:
        rec = boot_record()
        rec["crashes"] = rec.get("crashes", 0) + 1
        rec["last_crash"] = ("%s: %s" % (type(exc).__name__, exc))[:120]
        write_json(BOOTREC, rec)
    except OSError:
        pass
    if hasattr(sys, "print_exception"):
        sys.print_exception(exc)
    st = state()
    if st.get("state") in ("trial", "image_trial"):
        log("trial firmware %s crashed (%s): resetting (boot %d of %d)" % (
            st.get("version"), type(exc).__name__, st.get("boots", 0), BOOT_BUDGET))
        reset("crash")
