"""The core's loopback control endpoint, and the client the CLI uses to reach it.

Responsible for the control channel only: a one-line JSON request per TCP connection on 127.0.0.1,
authenticated by the secret in ``<data>/control.json`` (mode 0600), answered with one JSON line;
each op maps onto the CoreServer's public API. ``control_call`` is the client (a core of several
workers lists one control file per worker; see workers.py). No protocol logic lives here.
"""
import asyncio
import json
import logging
import os
import pathlib
import secrets

from .errors import CoreError, NotConnected

#: These log lines keep the name they had when this was part of server.py (log readers match it).
log = logging.getLogger("alabama.core.server")

CONTROL_FILE = "control.json"


class ControlEndpoint:
    """The endpoint of one running CoreServer: ``await start()`` writes its control file, ``close()``
    stops it and removes the file."""

    def __init__(self, server, path):
        self.server = server
        self.path = pathlib.Path(path)
        self._secret = None
        self._listener = None

    async def start(self):
        self._secret = secrets.token_hex(16)
        self._listener = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port = self._listener.sockets[0].getsockname()[1]
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            # "listen": where the core serves satellites (core/reach.py: the port a pairing record may carry)
            json.dump({"port": port, "secret": self._secret, "pid": os.getpid(),
                       "listen": [self.server.host, self.server.port]}, f)
        return self

    def close(self):
        self._listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    async def _client(self, reader, writer):
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            req = json.loads(line)
            if not secrets.compare_digest(str(req.get("secret", "")), self._secret):
                raise CoreError("bad control secret", "DENIED")
            result = await self._op(req)
            resp = {"ok": True, "result": result}
        except (CoreError, asyncio.TimeoutError, ValueError, KeyError, OSError) as e:
            resp = {"ok": False, "error": str(e) or type(e).__name__, "code": getattr(e, "code", type(e).__name__)}
        except Exception as e:  # noqa: BLE001
            log.exception("control request failed")
            resp = {"ok": False, "error": str(e), "code": "INTERNAL"}
        writer.write((json.dumps(resp) + "\n").encode())
        try:
            await writer.drain()
        finally:
            writer.close()

    async def _op(self, req):
        from google.protobuf import json_format
        srv = self.server
        op = req["op"]
        did = req.get("device")
        if did:
            did = srv.registry.find(did).device_id
        if op == "invoke":
            msg = await srv.invoke(did, req["name"], req.get("arguments") or "{}", req.get("timeout", 10.0))
        elif op == "setting":        # the value as typed (or a SettingValue's JSON): the session reads it by type
            msg = await srv.write_setting(did, req["key"], req["value"])
        elif op == "request_capture":
            msg = await srv.request_capture(did, req["ref"], req.get("image_source", 0))
        elif op == "render_text":
            return {"id": await srv.render_text(did, req["text"])}
        elif op == "show_image":
            shown = await srv.show_image(did, pathlib.Path(req["path"]).read_bytes(), req["mime"])
            im = shown.image
            return {"id": shown.id, "path": shown.path, "mime": im.mime, "bytes": len(im.data), "size": list(im.size),
                    "original_size": list(im.original_size) if im.original_size else None, "changed": im.changed}
        elif op == "health":
            out = {}
            for d in list(srv.connections):
                try:
                    out[d] = await srv.device_health(d, req.get("timeout", 5.0))
                except CoreError:
                    pass
            return out
        elif op == "status":
            out = {"connections": {d: c.session.report.as_dict() for d, c in srv.connections.items()}}
            if srv.worker is not None:
                out["worker"] = {"index": srv.worker.index, "handed_off": srv.handed_off,
                                 "handoff_failures": srv.handoff_failures, "adopted": srv.adopted}
            return out
        else:
            raise CoreError("unknown control op %r" % op, "BAD_OP")
        return json_format.MessageToDict(msg)


async def control_call(data_dir, req, timeout=30.0):
    """Send one request to a running server's control endpoint (used by the CLI). A core of several
    workers (workers.py) lists one control file per worker: a device request goes to each in turn and
    the answer of the one serving the device counts; ``status`` merges every worker's connections."""
    path = pathlib.Path(data_dir) / CONTROL_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        raise NotConnected("no running core for %s: start it with `alabama core serve --data %s`" % (data_dir, data_dir))
    if "workers" not in info:
        return await _control_one(data_dir, info, req, timeout)
    infos = []
    for name in info["workers"]:
        try:
            infos.append(json.loads((pathlib.Path(data_dir) / name).read_text()))
        except (OSError, ValueError):
            raise NotConnected("the core for %s lost worker file %s: restart `alabama core serve`" % (data_dir, name))
    if req.get("op") == "status":
        merged, ws = {}, []
        for i in infos:
            r = await _control_one(data_dir, i, req, timeout)
            merged.update(r["connections"])
            ws.append(r.get("worker"))
        return {"connections": merged, "workers": ws}
    if req.get("op") == "health":          # every worker's connected devices
        merged = {}
        for i in infos:
            merged.update(await _control_one(data_dir, i, req, timeout))
        return merged
    last = None
    for i in infos:
        try:
            return await _control_one(data_dir, i, req, timeout)
        except CoreError as e:
            if e.code != NotConnected.code:
                raise
            last = e
    raise last


async def _control_one(data_dir, info, req, timeout):
    req = dict(req, secret=info["secret"])
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", info["port"])
    except OSError:
        raise NotConnected("the core for %s is not running (stale %s): start it with `alabama core serve`"
                           % (data_dir, CONTROL_FILE))
    writer.write((json.dumps(req) + "\n").encode())
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), timeout)
    writer.close()
    resp = json.loads(line)
    if not resp["ok"]:
        if resp.get("code") == NotConnected.code:
            raise NotConnected(resp["error"])
        raise CoreError(resp["error"], resp.get("code"))
    return resp["result"]
