"""The virtual board's raw-REPL shim (alabama.board.rawrepl) for a unix port without a raw REPL (1.26.1)."""
import os
import subprocess
import sys

import pytest

from alabama.board import rawrepl
from alabama.board import sim


def enter(shim):
    to_child, to_user = shim.from_user(b"\r\x01")
    assert (to_child, to_user) == (b"\r\r", b"")             # a fresh prompt first: nothing else yet
    to_child, to_user = shim.from_child(b"\r\n>>> ")
    assert to_child.startswith(b"exec(") and to_user == b""  # the helper, once the prompt shows
    to_child, to_user = shim.from_child(b"exec(...)\r\n" + rawrepl.READY + b"\r\n>>> ")
    assert to_user == rawrepl.RAW_BANNER and to_child == b""


def test_a_command_runs_as_one_line_and_its_output_is_framed_as_the_raw_repl_does():
    shim = rawrepl.RawReplShim()
    enter(shim)
    to_child, to_user = shim.from_user(b"x = 6*7\nprint(x)\x04")
    assert to_user == b"OK" and to_child == b"_rr('x = 6*7\\nprint(x)')\r"
    # the echoed line, then the output between the markers, split at awkward places
    out = b""
    for piece in (b"_rr('x = 6*7\\nprint(x)')\r\n\x06", b"\x06B4", b"2\r\n\x04\x04\x06", b"\x06E>>> "):
        c, u = shim.from_child(piece)
        assert c == b""
        out += u
    assert out == b"42\r\n\x04\x04>"


def test_the_next_command_waits_for_the_prompt_the_unix_repl_flushes_input_before():
    shim = rawrepl.RawReplShim()
    enter(shim)
    shim.from_user(b"a=1\x04")
    shim.from_child(b"\x06\x06B\x04\x04\x06\x06E")         # done, but no prompt yet
    to_child, to_user = shim.from_user(b"print(a)\x04")
    assert to_user == b"OK" and to_child == b""               # held: it would be flushed
    to_child, _ = shim.from_child(b">>> ")
    assert to_child == b"_rr('print(a)')\r"


def test_raw_paste_is_declined_and_a_soft_reset_restarts_the_interpreter():
    shim = rawrepl.RawReplShim()
    enter(shim)
    assert shim.from_user(b"\x05A\x01") == (b"", b"R\x00")
    assert not shim.take_restart()
    assert shim.from_user(b"\x04") == (b"", b"OK")             # an empty command: a soft reset
    assert shim.take_restart() and not shim.take_restart()
    assert shim.rebooted().startswith(b"exec(")
    assert shim.from_child(rawrepl.READY)[1] == rawrepl.RAW_BANNER
    assert shim.from_user(b"\x02") == (b"\r", b"") and not shim.active


def test_what_follows_a_ctrl_c_waits_for_the_interrupted_interpreters_prompt():
    shim = rawrepl.RawReplShim()
    # `alabama logs --reset`: stop main.py, soft reboot; the Ctrl-D must not be flushed
    assert shim.from_user(b"\r\x03\x03\x02\x04") == (b"\r\x03\x03", b"")
    to_child, to_user = shim.from_child(b"Traceback ...\r\nKeyboardInterrupt:\r\n>>> ")
    assert to_child == b"\x02\x04" and to_user.endswith(b">>> ")


def test_an_oversized_command_is_refused_not_held():
    shim = rawrepl.RawReplShim()
    enter(shim)
    _, to_user = shim.from_user(b"x" * (rawrepl.MAX_COMMAND + 1))
    assert b"MemoryError" in to_user and to_user.endswith(b"\x04>")


def test_mpremote_on_the_32bit_virtual_board(tmp_path):
    """The real mpremote (exec and a file copy, which sends several commands) on build/mp32's 1.26.1."""
    mp = sim.micropython32()
    if mp is None:
        if os.environ.get("CI"):
            pytest.fail("no 32-bit micropython: run `make mp32`")
        pytest.skip("no 32-bit micropython: run `make mp32` (tools/mp32/build.sh)")
    assert not sim.has_raw_repl(mp)
    vb = sim.VirtualBoard(tmp_path / "flash", micropython=mp)
    vb.start()
    try:
        def mpremote(*args):
            r = subprocess.run([sys.executable, "-m", "mpremote", "connect", vb.pty_path] + list(args),
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stdout + r.stderr
            return r.stdout
        assert mpremote("exec", "import sys; print(sys.implementation.version[:2])") == "(1, 26)\n"
        src = tmp_path / "note.txt"
        src.write_bytes(bytes(range(256)) * 20)
        mpremote("cp", str(src), ":note.txt")
        assert (vb.flash / "note.txt").read_bytes() == src.read_bytes()
        r = subprocess.run([sys.executable, "-m", "mpremote", "connect", vb.pty_path, "exec", "1/0"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "ZeroDivisionError" in r.stdout + r.stderr
    finally:
        vb.stop()


def test_a_ctrl_c_lost_in_a_reboot_is_sent_again_until_the_prompt_shows():
    shim = rawrepl.RawReplShim()
    assert shim.from_user(b"\r\x03") == (b"\r\x03", b"")
    shim.from_user(b"\r\x01")                                 # held: no prompt yet
    assert shim.poll(10.0) == b""
    assert shim.poll(10.0 + rawrepl.RETRY_S / 2) == b""
    assert shim.poll(10.0 + rawrepl.RETRY_S) == b"\x03"     # the firmware booted past the first one
    to_child, _ = shim.from_child(b"KeyboardInterrupt:\r\n>>> ")
    assert to_child == b"\r\r"                                # the held \r, then the shim's own
    assert shim.poll(20.0) == b""
