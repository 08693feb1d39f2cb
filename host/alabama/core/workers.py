"""Several reference-core worker processes behind one TCP port (``alabama core serve --workers N``).

Why: one CoreServer's frame path is one Python thread; past ~200 live audio satellites it needs more
than one core (docs/core.md, Bench). Each worker is a full ``CoreServer`` listening on the same port
with ``SO_REUSEPORT`` (the kernel spreads new connections over the workers).

Every device has ONE owner worker, ``owner(device_id)`` (its fingerprint modulo N): a connection
accepted by another worker does its Noise handshake there (the device is only known after it), then
the socket, the Noise transport state and any bytes read past the handshake are handed to the owner
over a private Unix socketpair (SCM_RIGHTS). So everything per device stays in one process exactly as
with one worker: a reconnect replaces the previous session, a DEFERRED capture resumes from the same
store, tokens and approvals go through the shared SQLite registry (one row per device), reports are
written to DIR/reports under session ids unique per worker (``w1-s7``).

The parent (supervisor) creates the key and registry, reserves the port, forks the workers, writes
DIR/control.json naming each worker's control file (the CLI asks every worker and takes the owner's
answer, ``control.control_call``), forwards SIGINT/SIGTERM/SIGUSR1 and stops every worker when one ends.
"""
import asyncio
import json
import os
import signal
import socket

from ..errors import listen_error
from . import registry as reg

#: Largest hand-over message: the JSON header with the Noise state and unread bytes (hex) of one
#: connection (StreamReader limit + a Noise message, doubled by hex, with room).
MAX_MESSAGE = 1 << 20


class WorkerLink:
    """What a worker knows of its siblings: its index, the count, its inbox and everyone's outbox."""

    MAX_MESSAGE = MAX_MESSAGE

    def __init__(self, index, count, inbox, outboxes):
        self.index, self.count = index, count
        self.inbox, self.outboxes = inbox, outboxes
        self.control_file = "control-w%d.json" % index

    def owner(self, device_id):
        """The worker that serves this device: stable for a device, spread evenly over devices."""
        return int(device_id[:8], 16) % self.count

    def hand_off(self, index, header, fd):
        data = json.dumps(header).encode()
        if len(data) > MAX_MESSAGE:
            raise ValueError("hand-over state of %d bytes exceeds %d" % (len(data), MAX_MESSAGE))
        socket.send_fds(self.outboxes[index], [data], [fd])


def links(count):
    """One WorkerLink per worker (made before forking: every worker gets every outbox)."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(count)]
    for out, inbox in pairs:
        out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MAX_MESSAGE)
        inbox.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MAX_MESSAGE)
        out.settimeout(2.0)
        inbox.setblocking(False)
    outs = [p[0] for p in pairs]
    return [WorkerLink(i, count, pairs[i][1], outs) for i in range(count)]


def _reserve(host, port):
    """A bound, never-listening SO_REUSEPORT socket: holds the port (port 0: picks one) for the workers.
    Only listening sockets take connections, so it never receives any."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    return s


def run_loop(main, loop="asyncio"):
    """asyncio.run(main()), on uvloop's event loop when loop == "uvloop" (libuv: less CPU per read)."""
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            from ..errors import UsageError
            raise UsageError("--loop uvloop needs the uvloop package: pip install uvloop") from None
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
            return r.run(main())
    if loop != "asyncio":
        from ..errors import UsageError
        raise UsageError("--loop is asyncio or uvloop, not %r" % (loop,))
    return asyncio.run(main())


def serve(data_dir, workers, host="127.0.0.1", port=0, ready=None, on_start=None, on_stop=None, loop="asyncio",
          **server_kw):
    """Run ``workers`` CoreServer processes on one port until SIGINT/SIGTERM; returns an exit status.

    ready(port, public_key_hex): called in the parent once every worker listens. on_start(srv, index)
    and on_stop(srv, index): called in each worker after it started / before it stops (benches).
    server_kw: CoreServer's keyword arguments; loop: "asyncio" or "uvloop" (each worker's event loop). The
    parent does no protocol work."""
    if loop == "uvloop":
        run_loop(lambda: asyncio.sleep(0), loop)  # fails here, once, when uvloop is missing
    from .server import CONTROL_FILE
    import pathlib
    data_dir = pathlib.Path(data_dir)
    reg.load_or_create_key(data_dir)                # once, before the workers (no race creating it)
    reg.Registry(data_dir).close()                  # the schema, once
    try:
        hold = _reserve(host, port)
    except OSError as e:
        raise listen_error(e, host, port) from None
    port = hold.getsockname()[1]
    ls = links(workers)
    rfd, wfd = os.pipe()
    pids = []
    for i in range(workers):
        pid = os.fork()
        if pid == 0:                                # worker i
            os.close(rfd)
            code = 1
            try:
                for j, l in enumerate(ls):
                    if j != i:
                        l.inbox.close()
                hold.close()
                code = _worker(data_dir, host, port, ls[i], wfd, on_start, on_stop, server_kw, loop)
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(wfd)
    for l in ls:
        l.inbox.close()
    ctl = data_dir / CONTROL_FILE
    stopping = []

    def forward(sig, _frame):
        if sig != signal.SIGUSR1:
            stopping.append(sig)
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    status = 0
    try:
        with os.fdopen(rfd) as r:
            got = [r.readline() for _ in range(workers)]
        if all(g.startswith("ready") for g in got):
            tmp = data_dir / (CONTROL_FILE + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"workers": ["control-w%d.json" % i for i in range(workers)], "pid": os.getpid()}, f)
            os.replace(tmp, ctl)
            if ready is not None:
                ready(port, reg.server_public_key(data_dir).hex())
        else:
            status = 1
            forward(signal.SIGTERM, None)
        left = set(pids)
        while left:
            pid, st = os.waitpid(-1, 0)
            if pid in left:
                left.discard(pid)
                code = os.waitstatus_to_exitcode(st)
                if code and not stopping:
                    status = status or code
                if not stopping:         # one worker ended on its own: the core stops as a whole
                    forward(signal.SIGTERM, None)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        try:
            os.unlink(ctl)
        except OSError:
            pass
        hold.close()
    return status


def _worker(data_dir, host, port, link, wfd, on_start, on_stop, server_kw, loop):
    from .server import CoreServer

    async def main():
        srv = CoreServer(data_dir, host=host, port=port, worker=link, **server_kw)
        await srv.start()
        if on_start is not None:
            on_start(srv, link.index)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        os.write(wfd, b"ready %d\n" % link.index)
        os.close(wfd)
        await stop.wait()
        if on_stop is not None:
            on_stop(srv, link.index)
        await srv.stop()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)   # forwarded by the parent; a bench's on_start may take it
    run_loop(main, loop)
    return 0
