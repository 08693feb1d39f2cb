"""The raw REPL that mpremote needs, for a unix port that has none (MicroPython before 1.27).

The 32-bit virtual board runs Debian's MicroPython 1.26.1 unix port (tools/mp32), whose REPL is the
unix port's own readline loop: Ctrl-A does nothing there, so `mpremote connect <pty>` waits forever for
"raw REPL; CTRL-B to exit". The 1.27+ unix port (the venv's) uses the shared pyexec REPL and answers.

This shim sits in the virtual board's pump between the user's pseudo-terminal and the interpreter and
speaks the raw REPL protocol to the user (mpremote) while driving the interpreter's friendly REPL:

  user -> "\\x01"            shim defines a helper in the interpreter, answers the raw banner + ">"
  user -> code "\\x04"        shim answers "OK", sends `_rr(<repr(code)>)` as one friendly-REPL line
  interpreter -> output      forwarded between two markers the helper prints (chr(6) bytes never appear
                             in the echoed line: repr() escapes them), as "stdout \\x04 traceback \\x04"
  user -> "\\x04" (empty)     soft reset: the interpreter is restarted by the caller, the banner follows
  user -> "\\x05A\\x01"        raw-paste request: answered "R\\x00" (understood, not supported), so mpremote
                             falls back to the standard raw REPL
  user -> "\\x02"             back to the friendly REPL

The unix REPL flushes pending input (tcsetattr TCSAFLUSH) each time it enters its line editor, so the
shim sends a line only once the interpreter has printed its ">>> " prompt after the previous one; in the
friendly REPL too, whatever follows a Ctrl-C (mpremote's "\r\x03\x03\x02\x04", `alabama logs --reset`)
is held until the interrupted interpreter shows its prompt, or the flush would eat the Ctrl-D.

Sans-IO: `from_user(data)` and `from_child(data)` return (to_child, to_user), the bytes to write to the
interpreter and to the user; `take_restart()` says once when the interpreter must be restarted (a soft
reset); the virtual board does the writing and the restarting.
"""

RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
MARK = b"\x06\x06"
BEGIN, END, READY = MARK + b"B", MARK + b"E", MARK + b"R"
#: The helper, defined in the interpreter's globals on entry and after every soft reset. It runs one
#: command with the REPL's globals (state survives between commands, as on a board's raw REPL).
HELPER = (
    "def _rr(c):\n"
    " import sys\n"
    " w=sys.stdout.write\n"
    " w(chr(6)*2+'B')\n"
    " try:\n"
    "  exec(c,globals())\n"
    "  w(chr(4))\n"
    " except BaseException as e:\n"
    "  w(chr(4))\n"
    "  sys.print_exception(e,sys.stdout)\n"
    " w(chr(4)+chr(6)*2+'E')\n"
)
#: Longest command the shim buffers (mpremote's fs commands send a few KiB at most); past it, the command
#: is refused with a traceback-like line rather than held without bound.
MAX_COMMAND = 256 * 1024
#: How long bytes held after a Ctrl-C wait for the interpreter's prompt before Ctrl-C is sent again.
RETRY_S = 0.5


def _define_line():
    return b"exec(" + repr(HELPER).encode() + b");print(chr(6)*2+'R')\r"


class RawReplShim:
    """States: idle (the friendly REPL, passed through), entering, raw (collecting a command), running."""

    def __init__(self):
        self.state = "idle"
        self._cmd = bytearray()
        self._out = b""          # interpreter output held while looking for a marker
        self._esc = b""          # a partial \x05A\x01 from the user
        self._ready = False      # the interpreter is at its prompt, reading a line
        self._pending = b""      # the line to send once it is
        self._held = None        # user bytes after a Ctrl-C, held until the prompt
        self._tail = b""         # the last bytes of its output, to see a prompt split across reads
        self._restart = False
        self._held_at = None

    @property
    def active(self):
        return self.state != "idle"

    def poll(self, now):
        """Call now and then (now: seconds, monotonic) -> bytes for the interpreter. A Ctrl-C that arrived
        while it was rebooting (a deploy's soft reset, then mpremote at once) interrupts nothing: while
        bytes are held for a prompt that does not come, Ctrl-C is sent again every RETRY_S."""
        if self._held is None:
            self._held_at = None
            return b""
        if self._held_at is None:
            self._held_at = now
        elif now - self._held_at >= RETRY_S:
            self._held_at = now
            return b"\x03"
        return b""

    def take_restart(self):
        r, self._restart = self._restart, False
        return r

    def _send(self, to_child, line):
        if self._ready:
            self._ready = False
            to_child += line
        else:
            self._pending = line

    # ---------------------------------------------------------------------------------------------- user
    def from_user(self, data):
        to_child, to_user = bytearray(), bytearray()
        self._user(data, to_child, to_user)
        return bytes(to_child), bytes(to_user)

    def _user(self, data, to_child, to_user):
        for i in range(len(data)):
            c = data[i:i + 1]
            if self._held is not None:
                if c == b"\x03":
                    to_child += c          # a repeated Ctrl-C goes at once
                else:
                    self._held += c
                continue
            if self.state == "idle":
                if c == b"\x01":
                    self._enter(to_child)
                else:
                    to_child += c
                    if c == b"\x03":
                        self._held = bytearray()
                        self._tail = b""
                continue
            if self.state == "running":
                if c == b"\x03":
                    to_child += c          # Ctrl-C interrupts the running command, as on a board
                continue
            if self.state == "entering":
                continue                   # mpremote waits for the banner before it writes more
            self._raw_byte(c, to_child, to_user)

    def _raw_byte(self, c, to_child, to_user):
        if self._esc or c == b"\x05":
            self._esc += c
            if self._esc == b"\x05A\x01":
                self._esc = b""
                to_user += b"R\x00"      # raw-paste understood, not supported: mpremote falls back
            elif not b"\x05A\x01".startswith(self._esc):
                self._cmd += self._esc
                self._esc = b""
            return
        if c == b"\x02":
            self.state = "idle"
            self._cmd = bytearray()
            to_child += b"\r"            # the interpreter prints its ">>> " prompt
        elif c == b"\x03":
            self._cmd = bytearray()
        elif c == b"\x04":
            to_user += b"OK"
            if not self._cmd:
                self.state = "entering"    # soft reset: the banner comes after the reboot
                self._restart = True
            else:
                self._send(to_child, b"_rr(" + repr(bytes(self._cmd).decode("utf-8", "replace")).encode()
                           + b")\r")
                self._cmd = bytearray()
                self.state = "running"
        elif c == b"\x01":
            pass
        elif len(self._cmd) >= MAX_COMMAND:
            self._cmd = bytearray()
            to_user += (b"OK\x04MemoryError: virtual board raw REPL: command over %d bytes\r\n\x04>"
                        % MAX_COMMAND)
        else:
            self._cmd += c

    def _enter(self, to_child):
        self.state = "entering"
        self._cmd = bytearray()
        self._out = self._tail = b""
        self._ready = False
        self._pending = _define_line()
        to_child += b"\r"                # a fresh prompt: the helper is sent once it shows

    def rebooted(self):
        """The interpreter was restarted (soft reset) and shows its first prompt: -> bytes for it."""
        self.state = "entering"
        self._out = self._tail = self._pending = b""
        self._ready = False
        self._held = None
        return _define_line()

    # --------------------------------------------------------------------------------------------- child
    def from_child(self, data):
        to_child, to_user = bytearray(), bytearray()
        self._tail = (self._tail + data)[-64:]
        prompt = b">>> " in self._tail
        if prompt:
            self._tail = b""
        if self.state == "idle":
            to_user += data
        else:
            to_user += self._output(data)
            if prompt:
                if self._pending:
                    to_child += self._pending
                    self._pending = b""
                else:
                    self._ready = True
        if prompt and self._held is not None:
            held, self._held = bytes(self._held), None
            self._user(held, to_child, to_user)
        return bytes(to_child), bytes(to_user)

    def _output(self, data):
        self._out += data
        if self.state == "entering":
            if READY not in self._out:
                self._out = self._out[-len(READY):]
                return b""
            self._out = b""
            self.state = "raw"
            return RAW_BANNER
        if self.state == "running":
            if not self._out.startswith(BEGIN):
                i = self._out.find(BEGIN)
                if i < 0:
                    self._out = self._out[-len(BEGIN):]
                    return b""
                self._out = self._out[i:]
            j = self._out.find(END)
            if j < 0:                      # forward all but what may be the start of END
                n = max(len(BEGIN), len(self._out) - (len(END) - 1))
                body = self._out[len(BEGIN):n]
                self._out = BEGIN + self._out[n:]
                return body
            body = self._out[len(BEGIN):j]
            self._out = b""
            self.state = "raw"
            return body + b">"
        self._out = b""                   # raw, waiting for a command: the echoed prompt is not shown
        return b""
