"""The core's public hooks for test benches (docs/core.md, "Hooks for test benches"): send_raw, mint_id,
invoke(unchecked=True), on_frame_in / on_frame_out, CoreServer.listening."""
import pytest

from alabama.core.errors import LocalProtocolError
from alabama.core.testsat import capture_open, decode_frames, env, mic_cap, tool
from alabama.v1 import operations_pb2 as ops
from alabama.wire import frame as wire

from conftest import connect, make_server
from test_session import feed, opened, out


def test_send_raw_queues_bytes_untouched_ahead_of_bulk_and_unchecked():
    s = opened(caps=[mic_cap()], max_frame_bytes=200)
    unknown_arm = wire.encode_frame(b"\x08\x07" + b"\xaa\x07\x02\x10\x01")  # id 7, unknown field 117
    oversize = wire.encode_frame(b"\x08\x09", b"x" * 400)                    # over the device's 200-byte limit
    s.send_raw(oversize, control=False)                                        # bulk lane
    s.send_raw(unknown_arm + unknown_arm)                                      # two frames, one queue entry
    before = s.report.frames_out
    assert s.next_frame() == unknown_arm + unknown_arm                         # control first, joined as given
    assert s.next_frame() == oversize                                          # no limit applied
    assert s.next_frame() is None
    assert s.report.frames_out == before + 2
    assert s.report.errors_sent == {} and s.slots == {}                        # nothing tracked


def test_mint_id_is_the_sessions_even_id_sequence():
    s = opened(caps=[mic_cap()])
    assert [s.mint_id(), s.mint_id()] == [2, 4]
    rid = s.request_capture("r")                        # the core's own requests continue after them
    assert rid == 6


def test_invoke_unchecked_asks_for_an_undeclared_tool_and_tracks_its_id():
    s = opened(caps=[mic_cap()], tools=[tool("device.info")])
    with pytest.raises(LocalProtocolError) as ei:
        s.invoke("screen.capture")
    assert ei.value.code == "CAPABILITY_MISSING"
    iid = s.invoke("screen.capture", '{"x": 1}', unchecked=True)
    assert iid == 2 and iid in s.slots
    (sent,) = out(s)
    assert sent[0].id == 2 and sent[0].invoke.name == "screen.capture" and sent[0].invoke.arguments == '{"x": 1}'
    evs = feed(s, env(2, "error", code=ops.CAPABILITY_MISSING, message="no screen"))
    assert [type(e).__name__ for e in evs] == ["TerminalReceived"] and evs[0].op == "error" and iid not in s.slots
    assert s.report.violations == []


def test_frame_observers_see_every_plaintext_in_and_every_frame_out():
    s = opened(caps=[mic_cap()])
    got_in, got_out = [], []
    s.on_frame_in.append(got_in.append)
    s.on_frame_out.append(got_out.append)
    data = wire.encode_frame(capture_open(3, trigger=ops.BUTTON).SerializeToString())
    s.receive_data(data)
    assert got_in == [data]
    pid = s.ping()
    s.send_raw(wire.encode_frame(b"\x08\x05"))        # Envelope{id: 5}, no arm
    frames = []
    while True:
        f = s.next_frame()
        if f is None:
            break
        frames.append(f)
    assert got_out == frames and len(frames) == 2       # the session's own Ping, then the raw frame
    assert [(e.WhichOneof("op"), e.id) for e, _ in decode_frames(b"".join(frames))] == [("ping", pid), (None, 5)]


def test_server_listening_from_start_until_stop(tmp_path, run):
    async def body():
        srv = make_server(tmp_path)
        assert not srv.listening
        await srv.start()
        assert srv.listening
        sat = await connect(srv)
        await sat.close()
        await srv.stop()
        assert not srv.listening
    run(body())
