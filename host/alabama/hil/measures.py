"""Numbers read off a scenario's frame timeline (and the board's log): latencies, drops, handshakes; and the
word error rate of two transcripts (the intelligibility scenarios).

Responsible for the bench's measurements (names in ``report.MEASUREMENTS``) as pure functions of the
timeline rows, so they are testable on synthetic timelines. It never waits and never asserts: a
scenario decides what a number must be.
"""
from .timeline import CORE_TO_SAT, NOTE, SAT_TO_CORE

#: A capture chunk is "late" when it arrives this many chunk periods after the previous one.
LATE_FACTOR = 3.0


def _rows(tl):
    return tl.snapshot() if hasattr(tl, "snapshot") else list(tl)


def _get(e, k):
    return e[k] if isinstance(e, dict) else getattr(e, k)


def handshakes(tl):
    """Seconds from each 'board connects' note to the HelloResponse sent on that connection (any outcome)."""
    out, pending = [], None
    for e in _rows(tl):
        if _get(e, "dir") == NOTE and str(_get(e, "summary")).startswith("board connects"):
            pending = _get(e, "t")
        elif pending is not None and _get(e, "dir") == CORE_TO_SAT and _get(e, "op") == "hello_response":
            out.append(_get(e, "t") - pending)
            pending = None
    return out


def capture_end(tl, cid):
    """The row that ended capture ``cid``'s mic: the core's StreamEnd{END_DETECTED} or the board's StreamEnd."""
    for e in _rows(tl):
        if _get(e, "op") == "stream_end" and _get(e, "id") == cid and _get(e, "dir") in (SAT_TO_CORE, CORE_TO_SAT):
            return e
    return None


def render_after(tl, t):
    """(MediaRenderOpen row, its first chunk row) of the first render the core opened at or after ``t``."""
    rows = _rows(tl)
    for e in rows:
        if _get(e, "dir") == CORE_TO_SAT and _get(e, "op") == "media_render_open" and _get(e, "t") >= t:
            rid = _get(e, "id")
            first = next((c for c in rows if _get(c, "op") == "stream_chunk" and _get(c, "id") == rid
                          and _get(c, "dir") == CORE_TO_SAT), None)
            return e, first
    return None, None


def reply_latency(tl, cid, board_play_t=None):
    """Seconds from the end of capture ``cid`` to the first reply sample: the board's own 'playing' time
    when its log gives one (``board_play_t``, timeline seconds), else the first reply chunk the core sent."""
    end = capture_end(tl, cid)
    if end is None:
        return None
    t_end = _get(end, "t")
    if board_play_t is not None and board_play_t >= t_end:
        return board_play_t - t_end
    _, first = render_after(tl, t_end)
    return None if first is None else _get(first, "t") - t_end


def cancel_to_done(tl, rid):
    """Seconds from the core's StreamCancel on render ``rid`` to the board's PlaybackDone on it."""
    rows = _rows(tl)
    c = next((e for e in rows if _get(e, "dir") == CORE_TO_SAT and _get(e, "op") == "stream_cancel"
              and _get(e, "id") == rid), None)
    d = next((e for e in rows if _get(e, "dir") == SAT_TO_CORE and _get(e, "op") == "playback_done"
              and _get(e, "id") == rid), None)
    if c is None or d is None:
        return None
    return _get(d, "t") - _get(c, "t")


def capture_stats(tl, cid=None):
    """(dropped, late) over the board's capture chunks (every capture, or only ``cid``): seq gaps and
    arrivals more than LATE_FACTOR x the median inter-arrival after the previous chunk."""
    streams = {}
    opens = set()
    for e in _rows(tl):
        if _get(e, "dir") != SAT_TO_CORE:
            continue
        if _get(e, "op") == "capture_open":
            opens.add(_get(e, "id"))
        elif _get(e, "op") == "stream_chunk" and _get(e, "id") in opens and (cid is None or _get(e, "id") == cid):
            streams.setdefault(_get(e, "id"), []).append((_get(e, "t"), _get(e, "seq")))
    dropped = late = 0
    for chunks in streams.values():
        seqs = [s for _, s in chunks]
        expected = seqs[-1] - seqs[0] + 1 if seqs else 0
        dropped += max(0, expected - len(set(seqs))) + (seqs[0] if seqs else 0)
        gaps = sorted(b[0] - a[0] for a, b in zip(chunks, chunks[1:]))
        if len(gaps) >= 4:
            med = gaps[len(gaps) // 2]
            late += sum(1 for g in gaps if med > 0 and g > LATE_FACTOR * med)
    return dropped, late


def exchanges(tl):
    """[(capture id, seconds from its CaptureOpen to its Response/Error)] for every satellite capture."""
    rows = _rows(tl)
    opened = {}
    out = []
    for e in rows:
        op, d, i = _get(e, "op"), _get(e, "dir"), _get(e, "id")
        if d == SAT_TO_CORE and op == "capture_open":
            opened[i] = _get(e, "t")
        elif d == CORE_TO_SAT and op in ("response", "error") and i in opened:
            out.append((i, _get(e, "t") - opened.pop(i)))
    return out


def word_error_rate(ref, hyp):
    """Word-level Levenshtein distance / words in ``ref`` (1.0 for an empty ref and a non-empty hyp)."""
    r, h = ref.split(), hyp.split()
    if not r:
        return 0.0 if not h else 1.0
    d = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        prev, d[0] = d[0], i
        for j, hw in enumerate(h, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (rw != hw))
    return d[len(h)] / len(r)
