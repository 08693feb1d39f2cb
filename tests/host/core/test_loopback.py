"""The reference core over real loopback TCP + Noise, driven by the host test satellite (spec §4, §7.3)."""
import asyncio

from alabama.core import registry as reg
from alabama.core.testsat import (TestSatellite, capture_open, env, html_cap, mic_cap, silence, speaker_cap,
                                  text_cap, tone, tool, setting_int)
from alabama.v1 import operations_pb2 as ops, surface_pb2, content_pb2

from conftest import connect, make_server

PS = ops.PipelineState


async def voice_hello(sat, **kw):
    r = await sat.hello(**kw)
    assert r.env.hello_response.WhichOneof("result") == "accepted"
    return r


def test_r7_3_a_s4_1_voice_exchange_frame_by_frame(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await voice_hello(sat, caps=[mic_cap(), speaker_cap(rate=24000, buffer_ms=300)])
            start = len(sat.received)
            cid = sat.mint()
            await sat.send(capture_open(cid))
            seq = await sat.stream_audio(cid, tone(600), realtime=False)
            # silence until the endpointer closes the mic
            for _ in range(60):
                await sat.send(env(cid, "stream_chunk", seq=seq), silence(20))
                seq += 1
                if any(r.op == "stream_end" and r.id == cid for r in sat.received):
                    break
                await asyncio.sleep(0.005)
            end = await sat.expect("stream_end", cid)
            assert end.env.stream_end.reason == ops.END_DETECTED
            mro = await sat.expect("media_render_open")
            assert mro.id % 2 == 0 and mro.id >= 2
            assert mro.env.media_render_open.format.sample_rate == 24000   # resampled exactly to SpeakerParams
            resp = await sat.expect("response", cid, timeout=10)
            seq_ops = [op for op, i in sat.ops(start) if op not in ("stream_chunk",)]
            # LISTENING -> END_DETECTED -> PROCESSING -> render -> SPEAKING -> end -> Response -> IDLE
            assert seq_ops == ["pipeline_state", "stream_end", "pipeline_state", "media_render_open",
                               "pipeline_state", "stream_end", "response", "pipeline_state"]
            phases = [r.env.pipeline_state.phase for r in sat.received[start:] if r.op == "pipeline_state"]
            assert phases == [PS.LISTENING, PS.PROCESSING, PS.SPEAKING, PS.IDLE]
            chunks = [r for r in sat.received if r.op == "stream_chunk" and r.id == mro.id]
            assert [c.env.stream_chunk.seq for c in chunks] == list(range(len(chunks)))
            audio_in = len(tone(600)) + 30 * 640     # the endpointer ends after 600 ms (30 chunks) of quiet
            # echo brain: what it heard, resampled 16k -> 24k
            assert abs(sum(len(c.tail) for c in chunks) - audio_in * 3 // 2) <= 8
            assert resp.env.response.content == []
            await sat.close()
            await asyncio.sleep(0.1)
            rep = srv.reports_for(sat.device_id)[0]
            assert rep.clean, rep.to_json()
    run(body())


def test_s4_2_tool_call_and_s4_5_error_on_invoke(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await voice_hello(sat, tools=[tool("screen.capture")])
            srv.approve(sat.device_id)
            await sat.expect("paired")

            async def answer(ok):
                inv = await sat.expect("invoke", pred=lambda r: r.id not in answered)
                answered.add(inv.id)
                assert inv.id % 2 == 0 and inv.env.invoke.name == "screen.capture"
                if ok:
                    await sat.send(env(inv.id, "tool_result", content=[{"media": {"mime": "image/png", "data": b"\x89PNG"}}]))
                else:
                    await sat.send(env(inv.id, "error", code=ops.UNAVAILABLE, message="display asleep"))
            answered = set()
            res, _ = await asyncio.gather(srv.invoke(sat.device_id, "screen.capture"), answer(True))
            assert res.content[0].media.data == b"\x89PNG"
            from alabama.core.errors import RequestFailed
            import pytest
            with pytest.raises(RequestFailed) as ei:
                await asyncio.gather(srv.invoke(sat.device_id, "screen.capture"), answer(False))
            assert ei.value.code == "UNAVAILABLE" and ei.value.error_message == "display asleep"
            assert srv.reports_for(sat.device_id)[0].clean
            await sat.close()
    run(body())


def test_s4_3_barge_in_cancels_render(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv, auto_playback=True)
            await voice_hello(sat, caps=[mic_cap(), speaker_cap(buffer_ms=100)])
            c1 = sat.mint()
            await sat.send(capture_open(c1, trigger=ops.BUTTON))       # PTT: ends on our StreamEnd
            await sat.stream_audio(c1, tone(3000))                       # a 3 s reply: long enough to interrupt
            await sat.send(env(c1, "stream_end", reason=ops.PTT_RELEASE))
            mro = await sat.expect("media_render_open")
            await sat.expect("stream_chunk", mro.id)
            c2 = sat.mint()
            await sat.send(capture_open(c2, trigger=ops.WAKEWORD))
            cancel = await sat.expect("stream_cancel", mro.id)
            assert cancel.env.stream_cancel.reason == ops.BARGE_IN
            await sat.expect("response", c1)                 # the interrupted exchange still gets its one terminal
            await sat.expect("pipeline_state", pred=lambda r: r.env.pipeline_state.phase == PS.LISTENING
                             and r.t >= cancel.t)
            await sat.send(env(c2, "stream_cancel", reason=ops.STOPPED))
            await asyncio.sleep(0.2)
            assert srv.reports_for(sat.device_id)[0].clean, srv.reports_for(sat.device_id)[0].to_json()
            await sat.close()
    run(body())


def test_s4_4_tap_to_stop_while_thinking(tmp_path, run):
    class SlowBrain:
        async def reply(self, turn):
            await asyncio.sleep(30)

    async def body():
        async with make_server(tmp_path, brain=SlowBrain()) as srv:
            sat = await connect(srv)
            await voice_hello(sat)
            cid = sat.mint()
            await sat.send(capture_open(cid, trigger=ops.BUTTON))
            await sat.stream_audio(cid, tone(200))
            await sat.send(env(cid, "stream_end", reason=ops.PTT_RELEASE))
            await sat.expect("pipeline_state", pred=lambda r: r.env.pipeline_state.phase == PS.PROCESSING)
            await sat.send(env(0, "stop"))
            await sat.expect("response", cid)
            await sat.expect("pipeline_state", pred=lambda r: r.env.pipeline_state.phase == PS.IDLE)
            assert not any(r.op == "media_render_open" for r in sat.received)
            await sat.close()
    run(body())


def test_s4_4_stop_with_open_capture_sends_stream_cancel(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await voice_hello(sat)
            cid = sat.mint()
            await sat.send(capture_open(cid, trigger=ops.BUTTON))
            await sat.stream_audio(cid, tone(100))
            await sat.send(env(0, "stop"))
            c = await sat.expect("stream_cancel", cid)
            assert c.env.stream_cancel.reason == ops.STOPPED
            await asyncio.sleep(0.1)
            assert not any(r.op in ("response", "error") and r.id == cid for r in sat.received)
            await sat.close()
    run(body())


# ------------------------------------------------------------------------------ admission
def test_r7_3_a_unknown_device_pinned_as_guest(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await voice_hello(sat, caps=[html_cap(), text_cap()])
            dev = srv.registry.lookup(sat.device_id)
            assert dev.trust == reg.GUEST and dev.pubkey == sat.public_key.hex()
            import pytest
            from alabama.core.errors import LocalProtocolError
            with pytest.raises(LocalProtocolError):      # R10.5-c: never HTML to a guest
                srv.render(sat.device_id, surface_pb2.CAPABILITY_HTML_DISPLAY, [content_pb2.ContentBlock(text="<p>")])
            await asyncio.sleep(0.1)
            assert not any(r.op in ("paired", "render") for r in sat.received)
            await sat.close()
    run(body())


def test_r7_3_b_valid_token_pairs_automatically_and_is_consumed(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            # minted by another process (the CLI) while the server runs
            other = reg.Registry(tmp_path / "core")
            token, _ = other.mint_token(60)
            sat = await connect(srv)
            await voice_hello(sat, pairing_token=token)
            await sat.expect("paired")
            assert srv.registry.lookup(sat.device_id).trust == reg.PAIRED
            await sat.close()
            sat2 = await connect(srv)                    # a different key, same token: consumed
            await voice_hello(sat2, pairing_token=token)
            await asyncio.sleep(0.2)
            assert not any(r.op == "paired" for r in sat2.received)
            assert srv.registry.lookup(sat2.device_id).trust == reg.GUEST
            await sat2.close()
    run(body())


def test_r7_3_b_expired_or_unknown_token_stays_guest(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            clock = [1000.0]
            past = reg.Registry(tmp_path / "core", clock=lambda: clock[0])
            token, _ = past.mint_token(1)                 # expired long ago (clock is 1970)
            for t in (token, "no-such-token"):
                sat = await connect(srv)
                await voice_hello(sat, pairing_token=t)
                await asyncio.sleep(0.2)
                assert not any(r.op == "paired" for r in sat.received)
                assert srv.registry.lookup(sat.device_id).trust == reg.GUEST
                await sat.close()
    run(body())


def test_r7_3_approve_from_another_process_sends_paired_live(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await voice_hello(sat)
            reg.Registry(tmp_path / "core").set_trust(sat.device_id, reg.PAIRED)   # `alabama core approve`
            await sat.expect("paired", timeout=3)
            await sat.close()
    run(body())


def test_r7_3_k_preprovisioned_ik_device_admitted_paired_without_paired_frame(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            import os
            from alabama.noise.state import public_key
            priv = os.urandom(32)
            srv.registry.preconfigure(public_key(priv))
            sat = TestSatellite("127.0.0.1", srv.port, static_private=priv, server_key=srv.public_key)
            await sat.connect()
            await voice_hello(sat, tools=[tool("t")])
            await asyncio.sleep(0.2)
            assert not any(r.op == "paired" for r in sat.received)
            assert srv.reports_for(sat.device_id)[0].pattern == "IK"
            assert not srv.connections[sat.device_id].session.surface.guest
            await sat.close()
    run(body())


def test_r7_3_i_closed_mode_rejects_unknown_and_closes(tmp_path, run):
    async def body():
        async with make_server(tmp_path, closed=True) as srv:
            sat = await connect(srv)
            r = await sat.hello()
            assert r.env.hello_response.rejected.reason == ops.REJECTED_CLOSED
            await sat.wait_closed()
            assert srv.registry.lookup(sat.device_id) is None
    run(body())


def test_r13_a_version_mismatch_carries_server_version(tmp_path, run):
    async def body():
        async with make_server(tmp_path, min_wire_version=2) as srv:
            sat = await connect(srv)
            r = await sat.hello(wire_version=1)
            vm = r.env.hello_response.version_mismatch
            assert vm.server_version == 1 and vm.min_wire_version == 2 and "update" in vm.message
            await sat.wait_closed()
    run(body())


# ------------------------------------------------------------------------------ error codes, misbehaviour
def test_error_codes_provoked_over_loopback(tmp_path, run):
    async def body():
        async with make_server(tmp_path, max_concurrent_streams=2, max_frame_bytes=4096) as srv:
            sat = await connect(srv)
            await voice_hello(sat)
            got = {}

            async def provoke(name, *frames):
                start = len(sat.received)
                for e, tail in frames:
                    await sat.send(e, tail)
                r = await sat.expect("error", start=start)
                got[name] = ops.ErrorCode.Name(r.env.error.code)
            await provoke("unknown", (env(101, "stream_chunk", seq=0), b"ab"))
            await sat.send(capture_open(103, trigger=ops.BUTTON))
            await sat.send(env(103, "stream_end", reason=ops.PTT_RELEASE))
            await provoke("closed", (env(103, "stream_chunk", seq=1), b"ab"))
            await provoke("event", (env(105, "event", id="never.declared"), b""))
            await provoke("big", (env(107, "stream_chunk", seq=0), bytes(5000)))
            await sat.send(capture_open(109))
            await sat.send(capture_open(111))
            await provoke("streams", (capture_open(113), b""))
            await provoke("direction", (env(115, "render"), b""))
            assert got == {"unknown": "UNKNOWN_STREAM", "closed": "STREAM_CLOSED", "event": "CAPABILITY_MISSING",
                           "big": "FRAME_TOO_LARGE", "streams": "TOO_MANY_STREAMS", "direction": "INVALID_REQUEST"}
            await sat.close()
    run(body())


def test_conformance_clean_satellite_has_empty_report(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await voice_hello(sat, settings=[setting_int("volume")])
            srv.approve(sat.device_id)
            await sat.send(env(sat.mint(), "ping", t1=1))
            await sat.expect("ping_response")
            off = asyncio.ensure_future(srv.ping(sat.device_id))
            offset, rtt = await off
            assert rtt >= 0 and abs(offset) < 50_000
            async def answer():
                w = await sat.expect("settings_write")
                await sat.send(env(w.id, "setting_state", key="volume", value={"int_value": 7}))
            st, _ = await asyncio.gather(srv.write_setting(sat.device_id, "volume", surface_pb2.SettingValue(int_value=7)),
                                         answer())
            assert st.value.int_value == 7
            await sat.close()
            await asyncio.sleep(0.1)
            rep = srv.reports_for(sat.device_id)[0]
            assert rep.clean and rep.as_dict()["violations"] == []
            import json
            saved = list((tmp_path / "core" / "reports").glob("*.json"))
            assert json.loads(saved[0].read_text())["clean"] is True
    run(body())


def test_conformance_each_broken_rule_is_reported(tmp_path, run):
    """A satellite that breaks each checked rule: every one shows up in its report."""
    async def body():
        async with make_server(tmp_path, max_frame_bytes=2048) as srv:
            sat = await connect(srv)
            from alabama.core.testsat import event_desc
            schema = '{"type":"object","required":["n"]}'
            await voice_hello(sat, tools=[tool("dup"), tool("dup")], events=[event_desc("b", schema)])
            await sat.send(capture_open(4))                                   # wrong parity
            await sat.send(capture_open(7, mode=ops.DEFERRED, correlation_ref="x"))
            await sat.send(env(7, "stream_chunk", seq=0), b"ab")
            await sat.send(env(7, "stream_chunk", seq=5), b"ab")              # seq gap on RELIABLE
            await sat.send(env(7, "stream_end", reason=ops.COMPLETE))
            await sat.send(env(7, "stream_chunk", seq=6), b"ab")              # chunk after end
            await sat.send(env(9, "event", id="b", metadata='{"m": 1}'))      # bad metadata
            await sat.send(env(11, "event", id="undeclared"))                 # undeclared
            await sat.send(env(13, "stream_chunk", seq=0), bytes(4000))       # over the frame limit
            await sat.send(env(14, "tool_result"))                            # terminal for nothing
            await sat.send(env(15, "media_control"))                          # wrong direction
            await asyncio.sleep(0.3)
            rep = srv.reports_for(sat.device_id)[0]
            assert {"tool_names_unique", "id_parity", "seq", "chunk_after_end", "event_metadata", "event_undeclared",
                    "frame_too_large", "terminal_unmatched", "wrong_direction"} <= rep.checks()
            assert {"R8.2-d", "R6.3-a", "R10.10-c", "R10.10-d", "R8.2-e", "R8.2-c", "R6.1-b", "R10.10-a",
                    "R10.10-e"} <= rep.rules()
            await sat.close()
    run(body())


def test_bad_input_server_stays_up_and_other_satellites_unaffected(tmp_path, run):
    async def body():
        async with make_server(tmp_path, max_queued_frames=200, write_timeout=2.0) as srv:
            good = await connect(srv)
            await voice_hello(good)
            # 1. oversized total_len (over the handshake ceiling) before the Hello: closed
            a = await connect(srv)
            await a.send_raw(b"\xff\xff\x7f")
            await a.wait_closed()
            # 2. header_len > total_len: closed
            b = await connect(srv)
            await voice_hello(b)
            await b.send_raw(b"\x03\x09\x00\x00")
            await b.wait_closed()
            # 3. garbage after the handshake (not a Noise message): closed
            c = await connect(srv)
            c.stream.writer.write(b"\x00\x20" + bytes(range(32)))
            await c.wait_closed()
            # 4. a flood of opens: TOO_MANY_STREAMS, then closed when it persists on dead ids
            d = await connect(srv)
            await voice_hello(d)
            for i in range(40):
                await d.send(capture_open(2 * i + 3))
            await d.expect("error", pred=lambda r: r.env.error.code == ops.TOO_MANY_STREAMS)
            # 5. a slow reader: floods Pings and never reads
            e = TestSatellite("127.0.0.1", srv.port)
            await e.connect(read=False, rcvbuf=4096)
            await e.send(hello(id_=1))
            try:
                for i in range(20000):
                    await asyncio.wait_for(e.send(env(2 * i + 3, "ping", t1=i)), 1.0)
            except (asyncio.TimeoutError, ConnectionError, OSError):
                pass
            for _ in range(100):
                slow = [r for r in srv.reports if r.device_id == e.device_id]
                if slow and slow[0].close_reason:
                    break
                await asyncio.sleep(0.1)
            assert slow and slow[0].close_reason and "slow reader" in slow[0].close_reason
            # the good satellite is still served
            await good.send(env(good.mint(), "ping", t1=5))
            await good.expect("ping_response")
            assert not good.closed.is_set()
            closed = {r.device_id: r.close_reason for r in srv.reports}
            assert "framing error HEADER_LEN_OVER_TOTAL" == closed[b.device_id]
            await good.close()
            for s in (a, b, c, d, e):
                await s.close()
    from alabama.core.testsat import hello
    run(body())


def test_two_satellites_at_once_both_complete_voice_turns(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sats = [await connect(srv) for _ in range(3)]
            for s in sats:
                await voice_hello(s)

            async def turn(s):
                cid = s.mint()
                await s.send(capture_open(cid, trigger=ops.BUTTON))
                await s.stream_audio(cid, tone(300))
                await s.send(env(cid, "stream_end", reason=ops.PTT_RELEASE))
                await s.expect("response", cid, timeout=10)
            await asyncio.gather(*(turn(s) for s in sats))
            for s in sats:
                await s.close()
            await asyncio.sleep(0.1)
            assert all(r.clean for r in srv.reports), [r.to_json() for r in srv.reports if not r.clean]
    run(body())


def test_r8_2_a_speaker_with_zero_rate_gets_no_render_and_the_log_says_why(tmp_path, run, caplog):
    """A PTT exchange from a satellite whose SPEAKER says sample_rate 0: the core cannot render to it, so it sends
    no MediaRenderOpen (nothing to resample to), still ends the capture with its Response, and logs why."""
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await voice_hello(sat, caps=[mic_cap(), speaker_cap(rate=0)])
            cid = sat.mint()
            await sat.send(capture_open(cid, trigger=ops.BUTTON))
            await sat.stream_audio(cid, tone(300), realtime=False)
            await sat.send(env(cid, "stream_end", reason=ops.PTT_RELEASE))
            await sat.expect("response", cid, timeout=10)
            assert not [r for r in sat.received if r.op == "media_render_open"]
            await sat.close()
            await asyncio.sleep(0.1)
            rep = srv.reports_for(sat.device_id)[0]
            assert "speaker_format" in rep.checks()
    with caplog.at_level("WARNING", logger="alabama.core.pipeline"):
        run(body())
    said = [r.getMessage() for r in caplog.records if "not spoken" in r.getMessage()]
    assert len(said) == 1 and "SPEAKER has sample_rate 0" in said[0], said


def test_the_core_logs_each_event_a_board_reports_on_one_line(tmp_path, run, caplog):
    """Sweep 8: an Event's message was logged at INFO in text_format's default form, one line per field (a wall
    for a device.health); each report is one log line, its message in text format on that line."""
    import logging
    from alabama.core.testsat import event_desc, setting_int
    caplog.set_level(logging.INFO, logger="alabama.core")

    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await sat.hello(events=[event_desc("knob.turn", '{"type": "object"}')],
                            settings=[setting_int("volume", 0, 100, 50)])
            await sat.send(env(0, "event", id="knob.turn", metadata='{"steps": 2, "dir": "up"}'))
            await sat.send(env(0, "setting_state", key="volume", value={"int_value": 80}))
            await asyncio.sleep(0.5)
            await sat.close()
    run(body())
    said = [r.getMessage() for r in caplog.records if "knob.turn" in r.getMessage() or "volume" in r.getMessage()]
    assert len(said) >= 2, caplog.text
    for line in said:
        assert "\n" not in line, line
    assert any('msg=Event{id: "knob.turn" metadata: "{\\"steps\\": 2, \\"dir\\": \\"up\\"}"}' in ln for ln in said), said
