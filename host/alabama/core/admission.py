"""Admission of a satellite (spec §7.3) against the core's SQLite registry, and what follows it there.

Responsible for the registry's side of a connection: deciding a Hello (``admit``: pin unknown devices
as guests, honour pairing tokens, closed mode, re-send a lost Paired), registering an admitted
connection as its device's one live session (``on_admitted``) and sending Paired when a guest is
approved later (``elevate``). The session asks ``admit`` through its ``admit`` callable and never
sees the registry; this module does no I/O of its own beyond the registry and the connection's flush.
"""
import logging

from . import registry as reg
from . import session as cs

#: These log lines keep the name they had when this was part of server.py (log readers match it).
log = logging.getLogger("alabama.core.server")


def admit(conn, surface):
    """Admission (spec §7.3) of ``conn``'s device for the Hello ``surface``: returns a session.Admission.
    Never trusts Hello.multi_speaker or any `from` (R11-a)."""
    srv = conn.server
    r = srv.registry
    dev = r.lookup(conn.device_id)
    token_ok = False
    if surface.pairing_token and (dev is None or dev.trust != reg.PAIRED):
        token_ok = r.consume_token(surface.pairing_token, conn.device_id)
    if dev is None:
        if srv.closed and not token_ok:
            return cs.Admission(cs.Admission.REJECT_CLOSED, path="closed_unknown")
        dev = r.pin(conn.device_id, conn.pubkey, surface.display_name, surface.software)
        path = "new_guest"
    else:
        path = "known_" + dev.trust
    if token_ok:
        r.set_trust(conn.device_id, reg.PAIRED)
        return cs.Admission(cs.Admission.ACCEPT, trust=reg.PAIRED, send_paired=True, path="token")
    if surface.pairing_token and dev.trust != reg.PAIRED:
        path += "+bad_token"
    if dev.trust == reg.PAIRED and conn.stream is not None and conn.stream.pattern == "XX":
        # A paired device that comes back over XX has not pinned our key: its Paired was lost (the
        # connection dropped before it arrived, or it was approved while offline). Send it again on
        # this authenticated session (spec §7.3, §10.2): otherwise the device stays a TOFU guest
        # forever, since its single-use token is already spent.
        return cs.Admission(cs.Admission.ACCEPT, trust=dev.trust, send_paired=True, path=path + "+repaired")
    return cs.Admission(cs.Admission.ACCEPT, trust=dev.trust, path=path)


def on_admitted(conn, ev):
    """The session accepted the Hello (``HelloAccepted``): note the device in the registry and make
    ``conn`` its one live session, closing a previous connection of the same device."""
    srv = conn.server
    s = ev.surface
    srv.registry.touch(conn.device_id, s.display_name, s.software)
    old = srv.connections.get(conn.device_id)
    if old is not None and old is not conn:
        log.info("%s reconnected: closing its previous session %s", conn.device_id, old.session_id)
        old.replaced()
    srv.connections[conn.device_id] = conn
    conn.hello_done.set()
    log.info("%s admitted (%s, %s) from %s: %s", conn.device_id, ev.admission.trust, ev.admission.path,
             conn.peer, s.summary())


def elevate(conn):
    """The guest ``conn`` serves was approved (in-band or by another process): Paired on its session."""
    s = conn.session
    s.surface.guest = False
    if s.phase == cs.PHASE_OPEN:
        s.send_paired()
        conn.flush()
        log.info("%s approved: Paired sent on session %s", conn.device_id, conn.session_id)
