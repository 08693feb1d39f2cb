"""`alabama core serve --workers 2`: several worker processes behind one port keep one state per device.

Each device is served by one owner worker (workers.WorkerLink.owner); a connection the kernel gave to
the other worker is handed over after its Noise handshake (socket + transport state + unread bytes).
These tests fail when the hand-over is missing (a device on the wrong worker: the CLI still finds it,
but a reconnect leaves the old session open) or loses bytes (the Hello sent with the handshake).
"""
import asyncio
import os
import re
import signal
import subprocess
import sys

import pytest

from alabama.core.registry import fingerprint
from alabama.core.server import control_call
from alabama.core.testsat import TestSatellite, env, hello, tool
from alabama.core.workers import WorkerLink
from alabama.noise.state import public_key

ALABAMA = [sys.executable, "-m", "alabama.cli"]


def _env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "host")
    return e


def cli(*args):
    return subprocess.run(ALABAMA + list(args), capture_output=True, text=True, env=_env(), timeout=60)

WORKERS = 2


def _owner(priv):
    return WorkerLink(0, WORKERS, None, []).owner(fingerprint(public_key(priv)))


def _serve(data, loop="asyncio"):
    proc = subprocess.Popen(ALABAMA + ["core", "serve", "--listen", "127.0.0.1:0", "--data", data, "--ping-interval",
                                       "0", "--workers", str(WORKERS), "--loop", loop], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    key = re.search(r"key ([0-9a-f]{64})$", proc.stdout.readline().strip()).group(1)
    line = proc.stdout.readline()
    assert "%d workers" % WORKERS in line, line
    port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
    return proc, bytes.fromhex(key), port


def _stop(proc, data):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.stderr.read()[-3000:]
    assert not os.path.exists(os.path.join(data, "control.json"))


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_workers_one_owner_per_device_cli_reports_and_reconnect(tmp_path, run, loop):
    data = str(tmp_path / "d")
    proc, key, port = _serve(data, loop)
    try:
        async def body():
            sats, owners = [], set()
            # satellites of both owners, until at least one connection was handed over (the kernel's
            # SO_REUSEPORT choice is per connection: half of them land on the non-owner on average)
            for n in range(64):
                priv = os.urandom(32)
                sat = TestSatellite("127.0.0.1", port, static_private=priv, server_key=key)
                await sat.connect()
                await sat.send(hello(tools=[tool("device.blink")], display_name="w%d" % n))
                await sat.expect("hello_response")
                sats.append(sat)
                owners.add(_owner(priv))
                st = await control_call(data, {"op": "status"})
                if len(owners) == WORKERS and len(sats) >= 4 and sum(w["adopted"] for w in st["workers"]):
                    break
            st = await control_call(data, {"op": "status"})
            assert sorted(w["index"] for w in st["workers"]) == list(range(WORKERS))
            assert sum(w["handed_off"] for w in st["workers"]) == sum(w["adopted"] for w in st["workers"]) > 0
            assert sum(w["handoff_failures"] for w in st["workers"]) == 0
            assert set(st["connections"]) == {s.device_id for s in sats}
            for s in sats:   # each device's session is in its owner worker (session ids say which)
                sid = st["connections"][s.device_id]["session"]
                assert sid.startswith("w%d-" % _owner(s.static_private)), (sid, s.device_id)

            # the CLI reaches a device of each worker: an approval (registry, polled by every worker)
            # makes its owner send Paired, then an invoke goes to the worker serving it
            for w in range(WORKERS):
                sat = next(s for s in sats if _owner(s.static_private) == w)
                r = await asyncio.to_thread(cli, "core", "approve", "--data", data, sat.device_id[:12])
                assert r.returncode == 0, r.stderr
                await sat.expect("paired", timeout=10)

                async def answer():
                    inv = await sat.expect("invoke", timeout=20)
                    await sat.send(env(inv.id, "tool_result", content=[{"text": "blinked %d" % w}]))
                res, _ = await asyncio.gather(asyncio.to_thread(cli, "core", "invoke", "--data", data,
                                                                sat.device_id[:12], "device.blink", "{}"), answer())
                assert res.returncode == 0, res.stderr
                assert "blinked %d" % w in res.stdout
            devs = cli("core", "devices", "--data", data).stdout
            assert all(s.device_id in devs for s in sats)

            # a reconnect replaces the previous session, whichever worker the kernel picks for it
            for old in sats[:4]:
                new = TestSatellite("127.0.0.1", port, static_private=old.static_private, server_key=key)
                await new.connect()
                await new.send(hello(display_name="again"))
                await new.expect("hello_response")
                await asyncio.wait_for(old.closed.wait(), 10)
                st = await control_call(data, {"op": "status"})
                assert st["connections"][old.device_id]["session"].startswith("w%d-" % _owner(old.static_private))
                await new.close()
            for s in sats:
                await s.close()
        run(body())
    finally:
        _stop(proc, data)
    reports = os.listdir(os.path.join(data, "reports"))
    names = [r.split("-", 1)[1] for r in reports]     # <device>-<session id>.json
    assert len(set(names)) == len(names) and all(re.match(r"w\d+-s\d+\.json$", n) for n in names), names
