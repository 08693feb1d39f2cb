"""Firmware Noise initiator under the real `micropython` command <-> host asyncio responder, over TCP on
127.0.0.1: IK and XX handshakes, a 200,000-byte write spanning several Noise messages, many small writes
(coalesced into one TCP write, and packed into one Noise message), byte-identical both ways; and the
failure paths over a real socket (wrong pinned key, tampered transport, unknown protocol name)."""
import asyncio
import hashlib
import pathlib
import sys

import pytest

from alabama.noise import NoiseConnection, NoiseError, public_key
from alabama.noise import aio

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from mpharness import FIRMWARE, micropython_cmd  # noqa: E402

SAT = bytes(range(1, 33))
CORE = bytes(range(101, 133))
OTHER = bytes(range(201, 233))


def stream_a_parts():
    yield bytes((k * 31 + 7) & 255 for k in range(200000))
    for k in range(300):
        yield bytes([k & 255]) * (1 + k % 50)


def stream_b_parts():
    yield bytes((k * 17 + 1) & 255 for k in range(200000))
    for k in range(300):
        yield bytes([(k * 3) & 255]) * (1 + k % 41)


async def run_client(port, pattern, pinned):
    env = {"MICROPYPATH": str(FIRMWARE)}
    proc = await asyncio.create_subprocess_exec(
        micropython_cmd(), str(HERE / "mp_noise_client.py"), str(port), pattern, SAT.hex(),
        pinned.hex() if pinned else "-", "echo", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode, out.decode(), err.decode()


async def serve(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("pattern", ["IK", "XX"])
def test_r5_1_2_b_firmware_initiator_micropython_to_host_responder(pattern):
    result = {}

    async def handler(reader, writer):
        try:
            st = await aio.accept(reader, writer, CORE)
            result["remote_static"] = st.remote_static
            result["hash"] = st.handshake_hash
            result["pattern"] = st.pattern
            want = b"".join(stream_a_parts())
            got = await st.recv_exactly(len(want))
            result["rx_ok"] = got == want
            parts = list(stream_b_parts())
            await st.send(parts[0])                         # split into 4 Noise messages
            for p in parts[1:]:                              # many small writes
                await st.send(p)
            result["eof"] = await st.recv()
            st.close()
        except Exception as e:  # noqa: BLE001 - surface it in the assertion below
            result["error"] = repr(e)
            writer.close()

    async def main():
        server, port = await serve(handler)
        async with server:
            return await run_client(port, pattern, public_key(CORE) if pattern == "IK" else None)

    rc, out, err = asyncio.run(main())
    assert rc == 0, err
    assert "error" not in result, result
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    hs, rs = lines["HS"].split()
    assert result["pattern"] == pattern
    assert result["remote_static"] == public_key(SAT)      # device identity, authenticated (R5-b)
    assert bytes.fromhex(rs) == public_key(CORE)
    assert bytes.fromhex(hs) == result["hash"]
    assert lines["TX"] == str(sum(len(p) for p in stream_a_parts()))
    assert result["rx_ok"] is True
    assert lines["RX"] == "OK %d" % sum(len(p) for p in stream_b_parts())
    assert result["eof"] == b""


def test_r7_3_c_micropython_ik_wrong_core_key_aborts_no_fallback():
    seen = []

    async def handler(reader, writer):
        conn = NoiseConnection(False, OTHER)                 # a core with another key
        first = await reader.read(65536)
        seen.append(first)
        try:
            conn.receive(first)
        except NoiseError as e:
            seen.append(e.code)
        writer.close()

    async def main():
        server, port = await serve(handler)
        async with server:
            r = await run_client(port, "IK", public_key(CORE))
            await asyncio.sleep(0.2)
            return r

    rc, out, err = asyncio.run(main())
    assert rc == 0, err
    assert out.startswith("ERR IK_KEY_MISMATCH"), out
    assert seen[1] == "DECRYPT_FAILED"
    assert len(seen) == 2                                    # exactly one connection: no XX retry
    assert seen[0][2:34] == b"Noise_IK_25519_ChaChaPoly_SHA256"


def test_r5_a_micropython_rejects_tampered_transport_message():
    async def handler(reader, writer):
        st = await aio.accept(reader, writer, CORE)
        msg = bytearray(st.conn.encrypt(b"hello satellite"))
        msg[10] ^= 0x04
        writer.write(bytes(msg))
        await writer.drain()
        try:
            await asyncio.wait_for(reader.read(), 30)
        except (ConnectionError, asyncio.TimeoutError):
            pass
        writer.close()

    async def main():
        server, port = await serve(handler)
        async with server:
            return await run_client(port, "XX", None)

    rc, out, err = asyncio.run(main())
    assert rc == 0, err
    assert "ERR DECRYPT_FAILED" in out, out


@pytest.mark.parametrize("offer", [b"Noise_NN_25519_ChaChaPoly_SHA256", b"Noise_IK_25519_AESGCM_SHA256", b"\x00" * 40])
def test_r5_1_1_a_host_responder_closes_on_unknown_suite(offer):
    errors = []

    async def handler(reader, writer):
        try:
            await aio.accept(reader, writer, CORE)
        except NoiseError as e:
            errors.append(e.code)

    async def main():
        server, port = await serve(handler)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(len(offer).to_bytes(2, "big") + offer)
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), 10)   # the responder closes: EOF, nothing sent
            writer.close()
            await asyncio.sleep(0.05)
            return data

    assert asyncio.run(main()) == b""
    assert errors == ["UNSUPPORTED_PROTOCOL"]


def test_aio_host_to_host_roundtrip():
    async def handler(reader, writer):
        st = await aio.accept(reader, writer, CORE)
        await st.send(hashlib.sha256(await st.recv_exactly(100000)).digest())
        st.close()

    async def main():
        server, port = await serve(handler)
        async with server:
            st = await aio.open_connection("127.0.0.1", port, SAT, "IK", public_key(CORE))
            data = bytes(range(256)) * 390 + b"x" * 160
            await st.send(data)
            digest = await st.recv_exactly(32)
            st.close()
            return digest == hashlib.sha256(data).digest()

    assert asyncio.run(main())
