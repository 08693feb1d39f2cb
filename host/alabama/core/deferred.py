"""The reference core's store of partial DEFERRED captures (R10.4-d resume), bounded in time and bytes.

Responsible for keeping what a DEFERRED capture stored, keyed by (device_id, correlation_ref), until it
is resumed and finished -- and for forgetting it when it never is: an entry idle longer than ``ttl_s``
goes, and the bytes held never stay above ``max_bytes`` (least recently used first). An entry whose
capture is open right now (held by a pipeline) is never evicted. It does no I/O and reads only its
injectable clock.
"""
import collections
import logging
import time

log = logging.getLogger("alabama.core.deferred")

#: An entry nobody touched (no chunk, no open, no resume) for this long is evicted.
DEFERRED_TTL_S = 3600.0
#: Audio bytes held over all entries; above it the least recently touched idle entries go.
DEFERRED_MAX_BYTES = 64 * 1024 * 1024
#: The TTL sweep runs at most this often (on an open and from the server's poll loop).
SWEEP_EVERY_S = 30.0


class DeferredStore:
    """(device_id, correlation_ref) -> entry ``{"count", "last_ts", "audio"}`` (plus ``"done"`` once delivered).

    Reading: ``store.get(key)``, ``store[key]``, ``key in store``, ``len(store)``. Writing goes through
    ``create``, ``append`` (chunk audio: counted against ``max_bytes``), ``pop``. A pipeline ``hold``s a key
    while its capture is open and ``release``s it after; held entries are never evicted.
    """

    def __init__(self, ttl_s=DEFERRED_TTL_S, max_bytes=DEFERRED_MAX_BYTES, clock=time.monotonic):
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.clock = clock
        self._entries = collections.OrderedDict()    # key -> entry, least recently touched first
        self._touched = {}                           # key -> clock() of the last touch
        self._held = collections.Counter()           # key -> captures open on it now
        self.bytes = 0
        self.evicted = 0                             # entries evicted so far (idle or over the byte cap)
        self._next_sweep = None

    # -- mapping (read) ---------------------------------------------------------------------------
    def get(self, key, default=None):
        return self._entries.get(key, default)

    def __getitem__(self, key):
        return self._entries[key]

    def __contains__(self, key):
        return key in self._entries

    def __len__(self):
        return len(self._entries)

    def keys(self):
        return list(self._entries)

    # -- writing ----------------------------------------------------------------------------------
    def create(self, key):
        """A new empty entry for ``key`` (replacing none: call only when ``key not in store``)."""
        entry = self._entries[key] = {"count": 0, "last_ts": None, "audio": bytearray()}
        self._touch(key)
        return entry

    def append(self, key, entry, data, capture_ts):
        """Store one chunk's audio on ``entry`` (the one ``store[key]`` returned)."""
        entry["last_ts"] = capture_ts or entry["last_ts"]
        entry["audio"] += data
        entry["count"] += 1
        self.bytes += len(data)
        self._touch(key)
        if self.bytes > self.max_bytes:
            self._enforce_cap()

    def complete(self, key):
        """The recording is delivered (its Response went out): keep a tombstone (count, last capture_ts, no
        audio) until the TTL, so a device that never saw the Response and resumes is answered at once
        without a second turn (exactly once, R10.4-d)."""
        entry = self._entries.get(key)
        if entry is None:
            return
        self.bytes -= len(entry["audio"])
        entry["audio"] = bytearray()
        entry["done"] = True
        self._touch(key)

    def pop(self, key, default=None):
        entry = self._entries.pop(key, None)
        if entry is None:
            return default
        self._touched.pop(key, None)
        self.bytes -= len(entry["audio"])
        return entry

    def hold(self, key):
        """A capture on ``key`` is open: the entry may not be evicted until ``release``."""
        self._held[key] += 1
        self._touch(key)

    def release(self, key):
        if self._held[key] <= 1:
            del self._held[key]
        else:
            self._held[key] -= 1
        self._touch(key)

    def held(self, key):
        return self._held.get(key, 0) > 0

    # -- eviction ---------------------------------------------------------------------------------
    def _touch(self, key):
        if key in self._entries:
            self._entries.move_to_end(key)
            self._touched[key] = self.clock()

    def _evict(self, key, why):
        entry = self.pop(key)
        self.evicted += 1
        log.info("DEFERRED capture %s/%r dropped (%s): %d chunks, %d bytes never resumed",
                 key[0], key[1], why, entry["count"], len(entry["audio"]))

    def _enforce_cap(self):
        for key in list(self._entries):
            if self.bytes <= self.max_bytes:
                return
            if not self.held(key):
                self._evict(key, "over %d bytes held" % self.max_bytes)

    def sweep(self, force=False):
        """Evict every idle entry untouched for more than ``ttl_s``, then enforce the byte cap. Cheap when
        called often: does nothing until SWEEP_EVERY_S after the last sweep unless ``force``."""
        now = self.clock()
        if not force and self._next_sweep is not None and now < self._next_sweep:
            return
        self._next_sweep = now + min(SWEEP_EVERY_S, self.ttl_s)
        for key in list(self._entries):       # least recently touched first
            if now - self._touched[key] <= self.ttl_s:
                break
            if not self.held(key):
                self._evict(key, "idle more than %.0f s" % self.ttl_s)
        if self.bytes > self.max_bytes:
            self._enforce_cap()
