"""Issue 32 point 2: a link cut inside a Noise message is a connection loss (counted, not a conformance flag);
R5-a `decrypt` stays for a transport message whose tag fails to verify."""
import asyncio

from alabama.core.testsat import env, frame

from conftest import connect, make_server


async def _session_end(srv, device_id):
    for _ in range(200):
        reps = [r for r in srv.reports_for(device_id) if r.ended is not None]
        if reps:
            return reps[-1]
        await asyncio.sleep(0.02)
    raise AssertionError("the session did not end")


def _message(sat):
    """One whole Noise transport message (2-byte length + ciphertext) carrying a Ping frame."""
    return sat.stream.conn.encrypt(frame(env(sat.mint(), "ping", t1=1)))


def test_eof_inside_a_noise_message_is_a_connection_loss_not_r5_a(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await sat.hello()
            msg = _message(sat)
            sat.stream.writer.write(msg[:len(msg) // 2])      # the link is cut half-way through the message
            await sat.stream.writer.drain()
            sat.stream.writer.write_eof()
            rep = await _session_end(srv, sat.device_id)
            assert "R5-a" not in rep.rules() and rep.clean, [v.as_dict() for v in rep.violations]
            assert rep.connection_lost and "middle of a Noise message" in rep.close_reason
            assert rep.as_dict()["connection_lost"] == rep.connection_lost and srv.links_cut == 1
            await sat.close()
    run(body())


def test_a_tag_that_fails_to_verify_is_r5_a(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await sat.hello()
            msg = bytearray(_message(sat))
            msg[-1] ^= 0x01                                    # one bit of the Poly1305 tag
            sat.stream.writer.write(bytes(msg))
            await sat.stream.writer.drain()
            rep = await _session_end(srv, sat.device_id)
            assert ("R5-a", "decrypt") in {(v.rule, v.check) for v in rep.violations}
            assert rep.connection_lost is None and srv.links_cut == 0
            await sat.close()
    run(body())
