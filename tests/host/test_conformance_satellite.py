"""`alabama conformance satellite`: our firmware on the virtual board passes every row (through the CLI, its button
pushed over the board's control port); a mutant firmware that breaks one rule fails that row (so rows can fail: the
mutant runs are test_conformance_satellite_mutants_a/_b.py, satkit_support.py); a peer that is not Alabama, stalls, floods or never comes ends in verdict rows within the step bounds; wrong inputs."""
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

import pytest

from alabama.board import logwords as lw, sim
from alabama.conformance import rows, satkit
from alabama.hil import mutants

from satkit_support import KIT_MUTANTS, MUTANT_ROWS, ROOT, WATCH_S, board, failed_rows


@pytest.mark.needs_micropython
@pytest.mark.slow
def test_our_firmware_passes_every_row_through_the_cli(tmp_path):
    port = sim.free_port()
    vb = board(tmp_path, port)
    junit = tmp_path / "sat.xml"
    cmd = [sys.executable, "-m", "alabama.cli", "conformance", "satellite", "--listen", "127.0.0.1:%d" % port,
           "--ctl-port", str(vb.ctl_port), "--json", "--junit", str(junit), "--connect-timeout", "90",
           "--watch-timeout", str(WATCH_S)]
    vb.start()              # first: the CLI checks the control port at once; the board retries the core with backoff
    p = None
    try:
        vb.wait_log(lw.connecting(pattern="XX"), 60)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
        out, err = p.communicate(timeout=400)
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        vb.stop()
    assert p.returncode == 0, (out[-3000:], err[-2000:])
    doc = json.loads(out)
    assert doc["kind"] == "satellite" and doc["conformance"] == rows.JSON_FORMAT
    got = {r["id"]: r["verdict"] for r in doc["rows"]}
    assert list(got) == [rid for rid, _ in satkit.ROWS] + list(satkit.UNOBSERVABLE)
    scored = {rid: v for rid, v in got.items() if rid not in satkit.UNOBSERVABLE}
    assert set(scored.values()) == {rows.PASS}, [r for r in doc["rows"] if r["verdict"] != rows.PASS]
    assert {got[rid] for rid in satkit.UNOBSERVABLE} == {rows.NOT_OBSERVABLE}
    assert "static key is" in err
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == str(len(satkit.ROWS) + len(satkit.UNOBSERVABLE)) and suite.get("failures") == "0"


def test_the_mutant_table_is_split_without_loss():
    """Every mutant row is scored in exactly one of test_conformance_satellite_mutants_a/_b.py."""
    names = [m for m, _ in MUTANT_ROWS]
    assert len(names) == len(set(names)) == 10
    assert set(names) <= {m.name for m in mutants.MUTANTS + KIT_MUTANTS}


# -- peers that are not an Alabama satellite -----------------------------------------------------------
def _kit_thread(**kw):
    kit = satkit.SatKit("127.0.0.1", 0, step_s=1.0, **kw)
    out = {}
    ready = threading.Event()

    def go():
        import asyncio

        async def main():
            await kit.start()
            ready.set()
            kit.start = _noop
            out["rows"] = await kit.run()
        asyncio.run(main())
    t = threading.Thread(target=go, daemon=True)
    t.start()
    assert ready.wait(10)
    return kit, t, out


async def _noop():
    return None


@pytest.mark.parametrize("what,send,why", [
    ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a Noise protocol name"),
    ("tls", bytes.fromhex("16030100a5010000a10303") + bytes(range(7, 71)), "not a Noise protocol name"),
    ("garbage-flood", None, "not a Noise protocol name"),
    ("stall", b"", "no answer"),
    ("other-suite", len(b"Noise_XX_25519_AESGCM_SHA256").to_bytes(2, "big") + b"Noise_XX_25519_AESGCM_SHA256",
     "handshake"),
], ids=["http", "tls", "garbage-flood", "stall", "other-suite"])     # stable ids: xdist workers must collect alike
def test_a_peer_that_is_not_a_satellite_ends_in_failed_rows_quickly(what, send, why):
    kit, t, out = _kit_thread(connect_s=5)
    c = socket.create_connection(("127.0.0.1", kit.port))
    try:
        if send is None:
            for _ in range(200):
                try:
                    c.sendall(b"\x7f\xff" + os.urandom(4096))
                except OSError:
                    break
        elif send:
            c.sendall(send)
        t.join(20)
    finally:
        c.close()
    assert not t.is_alive(), "the kit hung on a %s peer" % what        # every step bounded: no hang (join above)
    result = out["rows"]
    assert failed_rows(result) == {"R5.1.2-a", "R6-a"}, result
    (row,) = [r for r in result if r.rid == "R5.1.2-a"]
    assert why in row.detail, row.detail
    assert all(r.verdict == rows.NOT_OBSERVABLE for r in result if r.rid not in ("R5.1.2-a", "R6-a"))


def test_a_peer_trickling_its_handshake_is_cut_off_by_the_whole_handshake_bound():
    """Each read comes within the step, but the handshake as a whole is bounded (2 steps)."""
    kit, t, out = _kit_thread(connect_s=5)
    name = b"Noise_XX_25519_ChaChaPoly_SHA256"
    c = socket.create_connection(("127.0.0.1", kit.port))
    t0 = time.monotonic()
    try:
        c.sendall(len(name).to_bytes(2, "big") + name + (32).to_bytes(2, "big"))
        for _ in range(40):                      # 32 bytes of e, one every 0.4 s: 13 s if nothing cut it off
            if not t.is_alive():
                break
            try:
                c.sendall(b"\x01")
            except OSError:
                break
            time.sleep(0.4)
        t.join(20)
    finally:
        c.close()
    assert not t.is_alive()
    (row,) = [r for r in out["rows"] if r.rid == "R5.1.2-a"]
    assert row.verdict == rows.FAIL and "no answer" in row.detail, row
    assert time.monotonic() - t0 < 8


def test_nothing_connects_ends_in_failed_rows_saying_so():
    kit, t, out = _kit_thread(connect_s=1)
    t.join(10)
    assert not t.is_alive()
    (row,) = [r for r in out["rows"] if r.rid == "R5.1.2-a"]
    assert row.verdict == rows.FAIL and "no satellite connected" in row.detail


@pytest.mark.parametrize("argv,says", [
    (["--listen", "nothing"], "give where the kit listens as HOST:PORT"),
    (["--listen", "127.0.0.1:70000"], "give where the kit listens as HOST:PORT"),
    (["--listen", "127.0.0.1:0", "--step-timeout", "0"], "--step-timeout: 0: give seconds > 0"),
    (["--listen", "127.0.0.1:0", "--watch-timeout", "-2"], "--watch-timeout: -2: give seconds > 0"),
    (["--listen", "127.0.0.1:0", "--ctl-port", "1"], "no virtual board answers"),
    (["--listen", "127.0.0.1:0", "--junit", "/nonexistent-dir/x.xml"], "cannot write --junit"),
    (["--listen", "256.1.1.1:0"], "cannot resolve '256.1.1.1' in --listen: give an IP address such as 0.0.0.0"),
])
def test_wrong_arguments_say_what_to_do_in_one_line(argv, says):
    r = subprocess.run([sys.executable, "-m", "alabama.cli", "conformance", "satellite", "--no-prompt"] + argv
                       if "--ctl-port" not in argv else
                       [sys.executable, "-m", "alabama.cli", "conformance", "satellite"] + argv,
                       capture_output=True, text=True, timeout=30, cwd=str(ROOT), stdin=subprocess.DEVNULL)
    assert r.returncode in (1, 2), r
    assert says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
