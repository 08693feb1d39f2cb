"""Images on an IMAGE_DISPLAY (spec §10.5, R10.5-a): inline when one frame holds them, ImageRenderOpen
when not, downscaled / recompressed / converted until they fit — never a blank display. Plus the
interleaving and frame-granular writes of such a bulk transfer (R10.1-a)."""
import asyncio
import io

import numpy as np
import pytest
from PIL import Image

from alabama.core import images
from alabama.core.errors import LocalProtocolError
from alabama.core.testsat import decode_frames, env, image_cap, mic_cap, text_cap
from alabama.v1 import surface_pb2
from alabama.wire import frame as wire

from conftest import connect, make_server


def picture(w, h, fmt="PNG", noise=True, seed=1, mode="RGB", **save):
    """A test picture: random noise (hard to compress) or a smooth gradient (easy)."""
    rng = np.random.default_rng(seed)
    if noise:
        a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    else:
        y, x = np.mgrid[0:h, 0:w]
        a = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), np.full_like(x, 128)], -1).astype(np.uint8)
    im = Image.fromarray(a, "RGB")
    if mode != "RGB":
        im = im.convert(mode)
    buf = io.BytesIO()
    im.save(buf, fmt, **save)
    return buf.getvalue()


def decoded(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


async def image_sat(srv, max_frame_bytes, **cap):
    sat = await connect(srv)
    r = await sat.hello(caps=[mic_cap(), image_cap(**cap)], max_frame_bytes=max_frame_bytes)
    assert r.env.hello_response.WhichOneof("result") == "accepted"
    return sat


async def wait_images(sat, n=1, timeout=10.0):
    for _ in range(int(timeout / 0.01)):
        if len(sat.images) >= n:
            return sat.images
        await asyncio.sleep(0.01)
    raise AssertionError("%d image(s) received, wanted %d; got %r" % (len(sat.images), n, sat.received[-10:]))


def frame_sizes(sat, start=0):
    return [wire.frame_total_len(r.env.ByteSize(), len(r.tail)) for r in sat.received[start:]]


# ------------------------------------------------------------------------------ over loopback
def test_r10_5_a_image_that_fits_one_frame_rides_inline_unchanged(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await image_sat(srv, 4096, max_image_bytes=100_000)
            png = picture(24, 16, noise=False)
            assert len(png) < 3000
            shown = await srv.show_image(sat.device_id, png, "image/png")
            assert shown.path == "inline" and not shown.image.changed
            (img,) = await wait_images(sat)
            assert img.path == "inline" and img.mime == "image/png" and img.data == png
            assert max(frame_sizes(sat)) <= 4096
            assert srv.reports_for(sat.device_id)[0].clean
            await sat.close()
    run(body())


def test_r10_5_a_image_over_one_frame_streams_over_image_render_open(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await image_sat(srv, 1024, max_image_bytes=64_000, width=800, height=600)
            png = picture(64, 64)                       # ~12 KB of noise: over one 1 KiB frame, under 64 KB
            assert 10_000 < len(png) < 64_000
            start = len(sat.received)
            shown = await srv.show_image(sat.device_id, png, "image/png")
            assert shown.path == "stream" and not shown.image.changed
            (img,) = await wait_images(sat)
            assert img.path == "stream" and img.id == shown.id and img.id % 2 == 0
            assert img.total_bytes == len(png) and img.data == png     # total_bytes exact, reassembly exact
            assert img.chunks >= len(png) // 1024
            assert max(frame_sizes(sat, start)) <= 1024                # every chunk under max_frame_bytes
            chunks = [r for r in sat.received if r.op == "stream_chunk" and r.id == shown.id]
            assert [c.env.stream_chunk.seq for c in chunks] == list(range(len(chunks)))
            assert decoded(img.data).size == (64, 64)
            assert srv.reports_for(sat.device_id)[0].clean
            await sat.close()
    run(body())


def test_r10_5_a_image_over_max_image_bytes_is_downscaled_to_fit(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await image_sat(srv, 1500, max_image_bytes=12_000, width=320, height=240,
                                  accepts=["image/jpeg"])
            photo = picture(1600, 1200, "JPEG", quality=95)     # ~2 MB: far over the 12 KB buffer
            assert len(photo) > 1_000_000
            start = len(sat.received)
            shown = await srv.show_image(sat.device_id, photo, "image/jpeg")
            (img,) = await wait_images(sat)
            assert shown.image.changed and shown.image.original_size == (1600, 1200)
            assert img.mime == "image/jpeg" and len(img.data) <= 12_000
            if img.path == "stream":
                assert img.total_bytes == len(img.data)
            im = decoded(img.data)                                   # a viewable picture, not nothing
            assert im.format == "JPEG" and im.width <= 320 and im.height <= 240 and im.width * im.height > 1000
            assert max(frame_sizes(sat, start)) <= 1500
            await sat.close()
    run(body())


def test_r10_5_a_without_an_image_buffer_the_inline_form_is_made_to_fit(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            # max_image_bytes 0: no reassembly buffer declared, so only a one-frame Render can carry it
            sat = await image_sat(srv, 2048, max_image_bytes=0, width=4000, height=4000, accepts=["image/png"])
            png = picture(300, 300)                                  # ~270 KB of noise, PNG only
            shown = await srv.show_image(sat.device_id, png, "image/png")
            (img,) = await wait_images(sat)
            assert shown.path == "inline" == img.path
            assert img.mime == "image/png" and decoded(img.data).format == "PNG"
            assert max(frame_sizes(sat)) <= 2048
            assert not any(r.op == "image_render_open" for r in sat.received)
            await sat.close()
    run(body())


def test_r10_5_a_converted_to_a_mime_type_the_display_accepts(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await image_sat(srv, 8192, max_image_bytes=50_000, accepts=["image/jpeg"])
            png = picture(40, 30, noise=False, mode="RGBA")
            shown = await srv.show_image(sat.device_id, png, "image/png")
            (img,) = await wait_images(sat)
            assert shown.image.changed and img.mime == "image/jpeg"
            assert decoded(img.data).format == "JPEG" and decoded(img.data).size == (40, 30)
            await sat.close()
    run(body())


def test_r10_5_a_device_error_on_the_image_stream_is_raised(tmp_path, run):
    async def body():
        from alabama.core.errors import RequestFailed
        from alabama.v1 import operations_pb2 as ops
        async with make_server(tmp_path) as srv:
            sat = await image_sat(srv, 512, max_image_bytes=200_000)
            png = picture(128, 128)                                  # ~50 KB: ~100 chunks

            async def refuse():
                o = await sat.expect("image_render_open")
                await sat.send(env(o.id, "error", code=ops.RESOURCE_EXHAUSTED, message="no buffer"))
            with pytest.raises(RequestFailed) as ei:
                await asyncio.gather(srv.show_image(sat.device_id, png, "image/png"), refuse())
            assert ei.value.code == "RESOURCE_EXHAUSTED"
            await sat.close()
    run(body())


def test_r10_10_e_r8_2_b_no_image_for_a_device_without_image_display(tmp_path, run):
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await connect(srv)
            await sat.hello(caps=[mic_cap(), text_cap()])
            n = len(sat.received)
            with pytest.raises(LocalProtocolError) as ei:
                await srv.show_image(sat.device_id, picture(8, 8), "image/png")
            assert ei.value.code == "CAPABILITY_MISSING"
            await asyncio.sleep(0.1)
            assert len(sat.received) == n
            await sat.close()
    run(body())


def test_r10_1_a_ping_interleaves_an_image_transfer_and_writes_are_frame_granular(tmp_path, run):
    """A Ping that arrives while a large image streams is answered before any further chunk is written
    (head-of-line delay bounded by one frame), between the image's chunks rather than behind the whole
    transfer; every Noise message the core writes carries exactly one whole frame."""
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await image_sat(srv, 300, max_image_bytes=400_000)
            conn = srv.connections[sat.device_id]
            trace = []                                     # ("in"|"out", op, id) in the core's own order
            encrypt, receive = conn.stream.conn.encrypt, conn.session.receive_data

            def recording_encrypt(plaintext):
                plaintext = bytes(plaintext)
                frames = wire.FrameDecoder(1 << 17)
                frames.set_limit(1 << 16)
                frames.feed(plaintext)
                got = list(frames)
                assert len(got) == 1 and not frames.buffered(), "a write that is not exactly one frame"
                trace.append(("out",) + op_id(got[0].header))
                return encrypt(plaintext)

            def recording_receive(data):
                for e, _ in decode_frames(bytes(data)):
                    trace.append(("in", e.WhichOneof("op"), e.id))
                return receive(data)
            conn.stream.conn.encrypt = recording_encrypt
            conn.session.receive_data = recording_receive
            png = picture(200, 200)                                  # ~120 KB: ~420 chunks of < 300 B

            async def ping_mid_transfer():
                o = await sat.expect("image_render_open")
                await sat.expect("stream_chunk", o.id)
                pid = sat.mint()
                await sat.send(env(pid, "ping", t1=7))
                return o.id, pid
            shown, (iid, pid) = await asyncio.gather(srv.show_image(sat.device_id, png, "image/png"),
                                                     ping_mid_transfer())
            await wait_images(sat)
            assert shown.path == "stream"
            i_ping = trace.index(("in", "ping", pid))
            i_pong = trace.index(("out", "ping_response", pid))
            i_end = trace.index(("out", "stream_end", iid))
            written_between = [t for t in trace[i_ping + 1:i_pong] if t[0] == "out"]
            assert len(written_between) <= 1, written_between       # bounded by one frame, not the transfer
            chunks_after = sum(1 for t in trace[i_pong:i_end] if t[1] == "stream_chunk" and t[2] == iid)
            assert chunks_after > 100, "the PingResponse went out near the end of the transfer"
            assert sum(1 for t in trace if t[0] == "out") > 400
            await sat.close()
    run(body())


def op_id(header):
    from alabama.v1 import envelope_pb2
    e = envelope_pb2.Envelope()
    e.ParseFromString(header)
    return e.WhichOneof("op"), e.id


# ------------------------------------------------------------------------------ fit_image, no network
def test_r10_5_a_fit_image_kept_when_it_fits():
    png = picture(10, 10)
    f = images.fit_image(png, "image/png", 10_000, ["image/png"], 100, 100)
    assert f.data == png and not f.changed and f.size == (10, 10)


def test_r10_5_a_fit_image_shrinks_until_under_budget_for_each_format():
    src = picture(400, 300)
    for mime in ("image/jpeg", "image/png", "image/webp", "image/bmp", "image/gif"):
        f = images.fit_image(src, "image/png", 5_000, [mime])
        assert len(f.data) <= 5_000 and f.mime == mime and f.changed, mime
        im = decoded(f.data)
        assert im.format == images.WRITABLE[mime] and im.size == f.size and im.width < 400, mime
        assert abs(im.width / im.height - 4 / 3) < 0.1                # aspect kept


def test_r10_5_a_fit_image_scales_to_the_panel_and_keeps_aspect():
    f = images.fit_image(picture(1000, 500, noise=False), "image/png", 10**6, [], 200, 200)
    assert f.size == (200, 100) and decoded(f.data).size == (200, 100)


def test_fit_image_refusals():
    with pytest.raises(images.ImageError) as ei:
        images.fit_image(b"not an image at all", "image/png", 5, [])
    assert ei.value.code == "INVALID_REQUEST"
    assert images.fit_image(b"<svg/>", "image/svg+xml", 100, ["image/svg+xml"]).data == b"<svg/>"   # fits: passed on
    with pytest.raises(images.ImageError) as ei:
        images.fit_image(picture(8, 8), "image/png", 10_000, ["image/x-unknown"])
    assert ei.value.code == "UNSUPPORTED"
    with pytest.raises(images.ImageError) as ei:
        images.fit_image(picture(8, 8), "image/png", 20, ["image/png"])   # not even 1x1 fits 20 bytes
    assert ei.value.code == "FRAME_TOO_LARGE"


def test_r10_5_a_alabama_core_show_puts_a_file_on_the_display(tmp_path, run):
    from test_cli_and_record import cli
    async def body():
        async with make_server(tmp_path) as srv:
            sat = await image_sat(srv, 1024, max_image_bytes=8_000, width=160, height=120, accepts=["image/jpeg"])
            f = tmp_path / "photo.png"
            f.write_bytes(picture(640, 480))
            res = await asyncio.to_thread(cli, "core", "show", "--data", str(tmp_path / "core"), sat.device_id[:10],
                                          str(f))
            assert res.returncode == 0, res.stderr
            import json
            shown = json.loads(res.stdout)
            assert shown["changed"] and shown["mime"] == "image/jpeg" and shown["original_size"] == [640, 480]
            (img,) = await wait_images(sat)
            assert len(img.data) == shown["bytes"] <= 8_000 and decoded(img.data).size == tuple(shown["size"])
            bad = await asyncio.to_thread(cli, "core", "show", "--data", str(tmp_path / "core"), sat.device_id[:10],
                                          str(tmp_path / "missing.png"))
            assert bad.returncode != 0 and "no such image file" in bad.stderr
            await sat.close()
    run(body())
