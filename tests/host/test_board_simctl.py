"""`alabama board press|release|long|mic` against a running virtual board's control channel (issue 36 item 5):
a voice exchange driven only from the command line while another client (the supervisor, as the web page
does) holds the channel open; a mic WAV at any rate/channels is converted (a 22 kHz stereo WAV used to be
accepted and then heard as silence); every mistake is one line, a non-zero exit, no traceback."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from alabama import audio
from vb_support import CoreThread, board

pytestmark = pytest.mark.needs_micropython

EXE = os.path.join(os.path.dirname(sys.executable), "alabama")


def alabama(*argv, env=None):
    e = dict(os.environ)
    e.pop("ALABAMA_SIM_CTL_PORT", None)
    e.update(env or {})
    return subprocess.run([EXE] + list(argv), capture_output=True, text=True, timeout=60, env=e)


def one_line_error(p):
    assert p.returncode != 0, p.stdout
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    return p.stderr.strip()


def test_cli_drives_a_running_virtual_board_and_converts_a_22khz_stereo_wav(tmp_path):
    rate, seconds = 22050, 1.2
    t = np.arange(int(rate * seconds)) / rate
    left = (9000 * np.sin(2 * math.pi * 440 * t)).astype("<i2")
    stereo = np.stack([left, left], axis=1).reshape(-1).tobytes()
    src = tmp_path / "in-22k-stereo.wav"
    audio.write(src, stereo, rate, channels=2)

    core = CoreThread(tmp_path / "core", brain="echo").start()
    vb = board(tmp_path, core, key=core.key)
    try:
        vb.start()
        vb.wait_log(r"accepted", 30)
        vb.state()                        # the supervisor now holds the channel open, as the web page does
        port = str(vb.ctl_port)
        # the converted WAV goes to the temp directory: this test's, not the machine's
        p = alabama("board", "mic", str(src), "--ctl-port", port, env={"TMPDIR": str(tmp_path)})
        assert p.returncode == 0 and "1.20 s" in p.stdout, p.stdout + p.stderr
        m = vb.mark()
        assert alabama("board", "press", "--ctl-port", port).returncode == 0
        vb.wait_log(r"capture \d+ opened", 10, m)
        import time
        time.sleep(seconds + 0.3)
        p = alabama("board", "release", env={"ALABAMA_SIM_CTL_PORT": port})      # the port from the environment
        assert p.returncode == 0 and p.stdout.strip() == "button: release", p.stdout + p.stderr
        vb.wait_log(r"capture \d+ done: Response", 30, m)
        vb.wait_log(r"playback done", 10, m)
        assert "mic file unusable" not in vb.log_text()
        assert (tmp_path / ("alabama-sim-mic-%s.wav" % port)).exists()
        _rate, _ch, _w, pcm = audio.read(tmp_path / "speaker.wav")
        assert audio.rms(pcm) > 500, "the echo of what the board heard is silence"
        st = vb.state()                                           # the supervisor's own connection still works
        assert st["connections"] >= 1 and 0 < st["heap_min"] <= st["heap_free"]       # device.info's figures
    finally:
        vb.stop()
        core.close()
    assert core.violations() == []


def test_cli_mistakes_are_one_line(tmp_path):
    assert "--ctl-port N" in one_line_error(alabama("board", "press"))
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free = s.getsockname()[1]
    s.close()                                             # nothing listens there now
    assert "no virtual board answers" in one_line_error(alabama("board", "release", "--ctl-port", str(free)))
    assert "not a TCP port" in one_line_error(alabama("board", "press", "--ctl-port", "70000"))
    missing = tmp_path / "nope.wav"
    assert "no WAV file at" in one_line_error(alabama("board", "mic", str(missing), "--ctl-port", str(free)))
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"hello, not a wav")
    assert "not a PCM WAV" in one_line_error(alabama("board", "mic", str(bad), "--ctl-port", str(free)))
    # `board sim --mic` refuses a missing file before the board starts (it used to run on, silent)
    err = one_line_error(alabama("board", "sim", "--dir", str(tmp_path / "b"), "--core", "127.0.0.1:7355",
                                 "--mic", str(missing)))
    assert "no WAV file at" in err


def test_a_port_that_listens_but_is_not_a_board_asks_whether_it_is_the_control_port():
    """A --ctl-port aimed at something that accepts and never answers (another service, a board's Alabama port):
    one line that names the likely mistake, not only "is it stuck?"."""
    import socket
    from alabama.board import simctl
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        with pytest.raises(simctl.SimCtlError) as e:
            simctl.send(srv.getsockname()[1], "press", timeout=0.3)
    finally:
        srv.close()
    msg = str(e.value)
    assert "\n" not in msg and "control port" in msg and "control on 127.0.0.1:N" in msg and "stuck" in msg


def test_a_control_channel_that_refuses_says_what_it_said(tmp_path):
    """An "err ..." reply is the board's own words in one line (a fake channel on loopback)."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        c.recv(100)
        c.sendall(b"err unknown command press\n")
        c.close()
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        err = one_line_error(alabama("board", "press", "--ctl-port", str(srv.getsockname()[1])))
        assert "refused 'press': unknown command press" in err
    finally:
        th.join(10)
        srv.close()
