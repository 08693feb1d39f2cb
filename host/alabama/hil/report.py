"""The HIL run report: one self-contained HTML page per run, JUnit XML for CI, a measurement history.

Responsible for rendering a finished run (a plain dict the pytest plugin builds, see ``RUN_FIELDS``)
into ``DIR/<run_id>/report.html`` + ``junit.xml`` + ``run.json``, appending its measurements to
``DIR/history.json`` and copying the latest page/XML to ``DIR/report.html`` / ``DIR/junit.xml``.
A fleet's run arrives in parts (``DIR/<run_id>/boards/<n>/`` per board, ``fleet/`` for the cross-board
scenarios: ``write_part``/``append_scenario``) and ``write_fleet`` merges them into the same files, one
column per board; a board's ``probe.json`` (``alabama board probe --json``) goes into the page's header.
Pictures are inline SVG computed with numpy (waveforms, heap, history sparklines): the page loads
nothing from anywhere. It never runs scenarios and never talks to a board or a core.
"""
import html
import json
import math
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET

import numpy as np

from alabama import audio

from .timeline import collapse

HISTORY_FILE = "history.json"
#: Runs kept in the history file (older ones are dropped).
HISTORY_KEEP = 200
#: Runs drawn in a history sparkline.
SPARK_RUNS = 30
#: Serial log lines shown per scenario (the whole log is in the run's artifacts).
LOG_TAIL_LINES = 400

#: Every measurement the bench takes: title, unit, which direction is better, what it measures.
MEASUREMENTS = {
    "reply_latency_ms": ("capture end \u2192 first reply sample", "ms", "lower",
                         "from the frame that ends the capture (StreamEnd END_DETECTED or PTT_RELEASE) to the board "
                         "playing the first sample of the reply (its serial log; else the first reply chunk sent)"),
    "cancel_silence_ms": ("StreamCancel \u2192 silence", "ms", "lower",
                          "from the core's StreamCancel to the board's speaker going silent (its serial log; else "
                          "its PlaybackDone, which it sends after stopping)"),
    "handshake_ms": ("handshake", "ms", "lower", "TCP connect to HelloResponse{Accepted} sent: Noise + Hello"),
    "liveness_detect_ms": ("silent core detected", "ms", "lower",
                           "from the core going silent (TCP open, nothing flows) to the board closing the connection"),
    "reconnect_ms": ("reconnect", "ms", "lower", "connection lost (cut, silence, core restart) to the next Accepted"),
    "heap_free_bytes": ("free heap", "B", "higher", "gc.mem_free() read from the board during the scenario"),
    "heap_drift_bytes": ("heap drift", "B", "lower", "free heap at the start minus at the end of a long run"),
    "frames_dropped": ("frames dropped", "", "lower", "capture chunks missing from the seq sequence"),
    "frames_late": ("frames late", "", "lower", "capture chunks arriving more than 3 chunk periods after the previous"),
    "exchange_ms": ("exchange duration", "ms", "lower", "CaptureOpen to its Response, per exchange"),
    "speech_wer": ("word error rate, source vs through the board", "", "lower",
                   "words the core heard in what the board sent that differ from what the same recogniser hears in "
                   "the source utterance (Levenshtein over words / source words): 0 = the board's audio path keeps "
                   "speech intact"),
}

RUN_FIELDS = """run dict: run_id, started (epoch s), duration (s), board, board_type, core_address, firmware
(git description), host, argv, scenarios: [ {nodeid, name, module, doc, requirements, outcome, duration,
message, timeline (rows), conformance (report dicts), measurements {name: [values]}, heap [[t, bytes]],
waves [{title, path, transcript (optional: what a recogniser heard in it)}], serial_log (text), notes []} ]"""


# ------------------------------------------------------------------------------------------ pictures
def read_wav(path):
    """(mono float samples in [-1, 1], rate) of a PCM WAV (8/16/32-bit); ([], 16000) when unreadable."""
    try:
        rate, ch, width, raw = audio.read(path)
    except (OSError, audio.WavError):
        return np.zeros(0), 16000
    try:
        return audio.to_float(raw, width, ch), rate
    except audio.WavError:
        return np.zeros(0), rate


def wave_svg(samples, rate, width=720, height=96, color="#2563eb"):
    """A waveform as inline SVG: the min/max envelope per pixel column, a time axis in seconds."""
    samples = np.asarray(samples, dtype=np.float64)
    n = len(samples)
    dur = n / float(rate) if rate else 0.0
    mid = height / 2.0
    head = ('<svg class="wave" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">'
            '<rect width="100%%" height="100%%" fill="#f8fafc"/><line x1="0" y1="%.1f" x2="%d" y2="%.1f" '
            'stroke="#cbd5e1"/>' % (width, height + 14, width, height + 14, mid, width, mid))
    if n == 0:
        return head + ('<text x="8" y="%d" font-size="12" fill="#64748b">no samples</text></svg>' % (mid + 4))
    cols = min(width, n)
    edges = np.linspace(0, n, cols + 1).astype(int)
    lo = np.minimum.reduceat(samples, edges[:-1])
    hi = np.maximum.reduceat(samples, edges[:-1])
    xs = np.linspace(0, width, cols)
    top = " ".join("%.1f,%.1f" % (x, mid - h * (mid - 2)) for x, h in zip(xs, hi))
    bot = " ".join("%.1f,%.1f" % (x, mid - l * (mid - 2)) for x, l in zip(xs[::-1], lo[::-1]))
    ticks = []
    if dur > 0:
        step = _nice_step(dur / 8.0)
        t = 0.0
        while t <= dur + 1e-9:
            x = width * t / dur
            ticks.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#94a3b8"/><text x="%.1f" y="%d" '
                         'font-size="10" fill="#475569">%gs</text>' % (x, height, x, height + 3, x + 2, height + 12,
                                                                       round(t, 3)))
            t += step
    peak = float(np.max(np.abs(samples)))
    return (head + '<polygon points="%s %s" fill="%s" stroke="%s" stroke-width="0.5"/>%s'
            '<text x="%d" y="12" font-size="10" fill="#475569" text-anchor="end">%.2f s, peak %.0f%%</text></svg>'
            % (top, bot, color, color, "".join(ticks), width - 4, dur, 100 * peak))


def _nice_step(x):
    if x <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * e >= x:
            return m * e
    return 10 * e


def series_svg(points, width=360, height=80, unit="", color="#059669", label_x="s"):
    """A line chart of (x, y) points as inline SVG with its min/max labelled."""
    pts = [(float(x), float(y)) for x, y in points if y is not None]
    head = ('<svg class="series" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">'
            '<rect width="100%%" height="100%%" fill="#f8fafc"/>' % (width, height, width, height))
    if not pts:
        return head + '<text x="8" y="%d" font-size="11" fill="#64748b">no data</text></svg>' % (height // 2)
    xs = np.array([p[0] for p in pts])
    ys = np.array([p[1] for p in pts])
    x0, x1 = xs.min(), xs.max()
    y0, y1 = ys.min(), ys.max()
    if x1 == x0:
        x1 = x0 + 1
    pad = (y1 - y0) * 0.1 or max(abs(y1) * 0.05, 1.0)
    lo, hi = y0 - pad, y1 + pad
    px = 6 + (xs - x0) / (x1 - x0) * (width - 12)
    py = (height - 14) - (ys - lo) / (hi - lo) * (height - 26)
    line = " ".join("%.1f,%.1f" % p for p in zip(px, py))
    dots = "".join('<circle cx="%.1f" cy="%.1f" r="2" fill="%s"/>' % (a, b, color) for a, b in zip(px, py))
    return (head + '<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>%s'
            '<text x="4" y="11" font-size="10" fill="#475569">max %s%s</text>'
            '<text x="4" y="%d" font-size="10" fill="#475569">min %s%s \u00b7 %s %g\u2013%g</text></svg>'
            % (line, color, dots, _fmt(y1), unit, height - 3, _fmt(y0), unit, label_x, round(xs.min(), 2),
               round(xs.max(), 2)))


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    if abs(v) >= 100 or float(v).is_integer():
        return "%d" % round(v)
    return "%.2f" % v


# ------------------------------------------------------------------------------------------ numbers
def aggregate(scenarios):
    """name -> {median, min, max, n} over every value every scenario measured."""
    vals = {}
    for sc in scenarios:
        for name, v in (sc.get("measurements") or {}).items():
            vals.setdefault(name, []).extend(x for x in (v if isinstance(v, list) else [v]) if x is not None)
    out = {}
    for name, v in sorted(vals.items()):
        if not v:
            continue
        a = np.array(v, dtype=np.float64)
        out[name] = {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()), "n": len(v)}
    return out


def counts(scenarios):
    c = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for sc in scenarios:
        c[sc.get("outcome", "error")] = c.get(sc.get("outcome", "error"), 0) + 1
    return c


def load_history(report_dir):
    p = pathlib.Path(report_dir) / HISTORY_FILE
    try:
        data = json.loads(p.read_text())
        runs = data.get("runs", [])
        return runs if isinstance(runs, list) else []
    except (OSError, ValueError, AttributeError):
        return []


def update_history(report_dir, run, agg):
    """Append this run's medians to DIR/history.json (atomically) and return the whole history."""
    runs = [r for r in load_history(report_dir) if r.get("run_id") != run["run_id"]]
    runs.append({"run_id": run["run_id"], "started": run.get("started"), "board": run.get("board"),
                 "board_type": run.get("board_type"), "firmware": run.get("firmware"),
                 "counts": counts(run.get("scenarios", [])),
                 "measurements": {k: v["median"] for k, v in agg.items()}})
    runs = runs[-HISTORY_KEEP:]
    p = pathlib.Path(report_dir) / HISTORY_FILE
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps({"format": 1, "runs": runs}, indent=1))
    os.replace(tmp, p)
    return runs


# ------------------------------------------------------------------------------------------ HTML
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#0f172a;background:#fff}
header{background:#0f172a;color:#f8fafc;padding:16px 24px}header h1{margin:0 0 4px;font-size:20px}
header .meta{color:#cbd5e1;font-size:12px}main{padding:16px 24px;max-width:1200px}
h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #e2e8f0;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0 12px}th,td{padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f1f5f9;font-weight:600;font-size:12px}tr:nth-child(even) td{background:#fafafa}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:9px;font-size:12px;font-weight:600;color:#fff}
.passed{background:#16a34a}.failed,.error{background:#dc2626}.skipped{background:#94a3b8}
.totals span{margin-right:14px}details{margin:10px 0;border:1px solid #e2e8f0;border-radius:6px;padding:6px 10px}
summary{cursor:pointer;font-weight:600}pre{background:#0f172a;color:#e2e8f0;padding:8px;overflow:auto;
max-height:420px;font-size:12px;white-space:pre-wrap}pre.fail{background:#450a0a;color:#fee2e2}
.tl td{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;white-space:nowrap}.tl td.sum{white-space:normal}
.dir-sat{color:#1d4ed8}.dir-core{color:#b45309}.dir-note{color:#64748b;font-style:italic}
.doc{color:#334155}.req{color:#475569;font-size:12px}.viol{color:#b91c1c}
header table{margin:8px 0 4px}header th{background:#1e293b;color:#f8fafc}header td{color:#e2e8f0}
header tr:nth-child(even) td{background:#111c33}.probe{margin-top:10px;font-size:12px}.off{color:#fca5a5}
.down{color:#b91c1c;font-weight:600}td.cell{text-align:center}
.figs{display:flex;flex-wrap:wrap;gap:12px}.fig{font-size:12px;color:#334155}.transcript{font:13px ui-monospace,monospace;color:#0f172a}
"""

_DIR_TEXT = {"sat->core": ("Sat \u2192 Core", "dir-sat"), "core->sat": ("Core \u2192 Sat", "dir-core"),
             "note": ("", "dir-note")}


def _e(s):
    return html.escape(str(s), quote=True)


def _badge(outcome):
    return '<span class="badge %s">%s</span>' % (_e(outcome), _e(outcome))


def timeline_html(rows):
    if not rows:
        return '<p class="doc">no frames recorded</p>'
    out = ['<table class="tl"><tr><th>t (ms)</th><th>direction</th><th>operation</th><th>id</th><th>seq</th>'
           '<th>header B</th><th>tail B</th><th>fields</th></tr>']
    for r in collapse(rows):
        d, cls = _DIR_TEXT.get(r["dir"], (r["dir"], ""))
        if r["dir"] == "note":
            out.append('<tr><td class="num">%.1f</td><td></td><td class="dir-note" colspan="6">%s</td></tr>'
                       % (1000 * r["t"], _e(r["summary"])))
            continue
        out.append('<tr><td class="num">%.1f</td><td class="%s">%s</td><td class="%s">%s</td><td class="num">%s</td>'
                   '<td class="num">%s</td><td class="num">%s</td><td class="num">%s</td><td class="sum">%s</td></tr>'
                   % (1000 * r["t"], cls, d, cls, _e(r.get("title") or r["op"]), _e(r["id"] if r["id"] else "-"),
                      "" if r.get("seq") is None else r["seq"], r.get("header", ""), r.get("tail") or "",
                      _e(r.get("summary", ""))))
    out.append("</table>")
    return "".join(out)


def conformance_html(reports):
    if not reports:
        return '<p class="doc">no core session</p>'
    out = ['<table><tr><th>session</th><th>pattern</th><th>admission</th><th>frames in/out</th><th>closed</th>'
           '<th>violations</th></tr>']
    for r in reports:
        v = r.get("violations") or []
        vs = "<br>".join('<span class="viol">%s %s</span>: %s' % (_e(x.get("rule")), _e(x.get("check")),
                                                                  _e(x.get("detail"))) for x in v) or "none"
        out.append("<tr><td>%s</td><td>%s</td><td>%s</td><td class='num'>%s/%s</td><td>%s</td><td>%s</td></tr>"
                   % (_e(r.get("session")), _e(r.get("noise_pattern")), _e(r.get("admission")), r.get("frames_in"),
                      r.get("frames_out"), _e(r.get("close_reason") or "open"), vs))
    out.append("</table>")
    return "".join(out)


def measurements_html(agg, history, run_id):
    if not agg:
        return '<p class="doc">no measurements in this run</p>'
    out = ['<table><tr><th>measurement</th><th>median</th><th>min</th><th>max</th><th>n</th><th>previous run</th>'
           '<th>history (last %d runs)</th></tr>' % SPARK_RUNS]
    past = [r for r in history if r.get("run_id") != run_id]
    for name, a in agg.items():
        title, unit, better, what = MEASUREMENTS.get(name, (name, "", "lower", ""))
        prev = next((r["measurements"][name] for r in reversed(past) if name in r.get("measurements", {})), None)
        hist = [(i, r["measurements"].get(name)) for i, r in enumerate(history[-SPARK_RUNS:])
                if name in r.get("measurements", {})]
        delta = ""
        if prev is not None:
            d = a["median"] - prev
            worse = (d > 0) if better == "lower" else (d < 0)
            delta = ' <span style="color:%s">(%+.1f)</span>' % ("#dc2626" if worse and d else "#16a34a", d)
        out.append('<tr><td title="%s">%s</td><td class="num">%s %s</td><td class="num">%s</td><td class="num">%s</td>'
                   '<td class="num">%d</td><td class="num">%s%s</td><td>%s</td></tr>'
                   % (_e(what), _e(title), _fmt(a["median"]), _e(unit), _fmt(a["min"]), _fmt(a["max"]), a["n"],
                      _fmt(prev), delta, series_svg(hist, 240, 48, unit, label_x="run")))
    out.append("</table>")
    return "".join(out)


HEALTH_FIELDS = (("firmware", "firmware"), ("firmware_digest", "digest"), ("uptime_ms", "uptime ms"),
                 ("heap_free", "heap free"), ("heap_min", "heap min"), ("rssi", "RSSI dBm"),
                 ("reset_reason", "reset reason"), ("crash_count", "crashes"), ("reconnect_count", "reconnects"),
                 ("frames_dropped", "frames dropped"), ("ota", "update"), ("source", "from"))


def health_html(health):
    """One row per device: its device.info (or device.health Event) at the end of a scenario (docs/ota.md)."""
    if not health:
        return "<p class='req'>no device health recorded</p>"
    rows = []
    for did in sorted(health):
        h = health[did] or {}
        cells = []
        for k, _ in HEALTH_FIELDS:
            v = h.get(k, h.get("digest") if k == "firmware_digest" else None)
            if k == "ota" and isinstance(v, dict):
                v = v.get("state", "") + (": " + v["error"] if v.get("error") else "")
            if k == "firmware_digest" and v:
                v = v[:12]
            cells.append("<td>%s</td>" % _e("-" if v is None else v))
        rows.append("<tr><td>%s</td>%s</tr>" % (_e(did[:16]), "".join(cells)))
    return "<table><tr><th>device</th>%s</tr>%s</table>" % (
        "".join("<th>%s</th>" % _e(t) for _, t in HEALTH_FIELDS), "".join(rows))


def run_health(scenarios):
    """The last health each device reported over the run."""
    out = {}
    for sc in scenarios:
        out.update(sc.get("health") or {})
    return out


def scenario_html(sc, idx, anchor=None):
    parts = []
    outcome = sc.get("outcome", "error")
    parts.append('<details id="%s"%s><summary>%s %s <span class="req">%.1f s</span></summary>'
                 % (anchor or "sc%d" % idx, " open" if outcome in ("failed", "error") or idx == 0 else "", _badge(outcome), _e(sc.get("name")),
                    sc.get("duration") or 0.0))
    if sc.get("doc"):
        parts.append('<p class="doc">%s</p>' % _e(sc["doc"]))
    if sc.get("requirements"):
        parts.append('<p class="req">requirements: %s</p>' % _e(", ".join(sc["requirements"])))
    if sc.get("boards"):
        parts.append('<p class="req">boards on one core: %s</p>' % _e("; ".join(sc["boards"])))
    if sc.get("message"):
        parts.append('<pre class="fail">%s</pre>' % _e(sc["message"]))
    if sc.get("notes"):
        parts.append("<ul>%s</ul>" % "".join("<li>%s</li>" % _e(n) for n in sc["notes"]))
    ms = sc.get("measurements") or {}
    if ms:
        parts.append("<table><tr><th>measurement</th><th>values</th></tr>%s</table>" % "".join(
            "<tr><td>%s</td><td class='num'>%s %s</td></tr>"
            % (_e(MEASUREMENTS.get(k, (k,))[0]), _e(", ".join(_fmt(x) for x in (v if isinstance(v, list) else [v]))),
               _e(MEASUREMENTS.get(k, ("", ""))[1])) for k, v in sorted(ms.items())))
    figs = []
    for w in sc.get("waves") or []:
        x, rate = read_wav(w["path"]) if w.get("path") else (np.zeros(0), 16000)
        said = ('<br><span class="transcript">heard: &ldquo;%s&rdquo;</span>' % _e(w["transcript"])
                if w.get("transcript") is not None else "")
        figs.append('<div class="fig">%s<br>%s%s</div>' % (_e(w.get("title", "")), wave_svg(x, rate), said))
    if sc.get("heap"):
        figs.append('<div class="fig">free heap (bytes) over time (s)<br>%s</div>'
                    % series_svg(sc["heap"], 360, 96, " B"))
    if figs:
        parts.append('<div class="figs">%s</div>' % "".join(figs))
    if sc.get("health"):
        parts.append("<h3>Device health</h3>" + health_html(sc["health"]))
    parts.append("<h3>Frame timeline</h3>" + timeline_html(sc.get("timeline") or []))
    parts.append("<h3>Core conformance report</h3>" + conformance_html(sc.get("conformance") or []))
    log = sc.get("serial_log") or ""
    if log:
        lines = log.splitlines()
        shown = lines[-LOG_TAIL_LINES:]
        parts.append("<h3>Serial log%s</h3><pre>%s</pre>" % (
            " (last %d of %d lines)" % (len(shown), len(lines)) if len(shown) < len(lines) else "",
            _e("\n".join(shown))))
    parts.append("</details>")
    return "".join(parts)


def render_html(run, agg, history):
    scs = run.get("scenarios", [])
    c = counts(scs)
    rows = []
    for i, sc in enumerate(scs):
        ms = sc.get("measurements") or {}
        key = ", ".join("%s %s" % (MEASUREMENTS.get(k, (k,))[0], _fmt(float(np.median(v)) if isinstance(v, list) and v
                                                                     else (v if not isinstance(v, list) else None)))
                        for k, v in sorted(ms.items()) if k in ("reply_latency_ms", "cancel_silence_ms",
                                                                 "handshake_ms", "reconnect_ms"))
        nviol = sum(len(r.get("violations") or []) for r in sc.get("conformance") or [])
        rows.append('<tr><td><a href="#sc%d">%s</a></td><td>%s</td><td class="num">%.1f</td><td class="num">%s</td>'
                    '<td>%s</td></tr>' % (i, _e(sc.get("name")), _badge(sc.get("outcome", "error")),
                                           sc.get("duration") or 0.0, nviol, _e(key)))
    title = "Alabama HIL run %s \u2014 %s" % (run.get("run_id"), run.get("board"))
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>%s</title><style>%s</style></head>"
            "<body><header><h1>%s</h1><div class='meta'>board type %s \u00b7 core %s \u00b7 firmware %s \u00b7 host %s"
            " \u00b7 started %s \u00b7 %.1f s</div>%s</header><main>"
            "<p class='totals'><span>%s %d</span><span>%s %d</span><span>%s %d</span><span>%s %d</span></p>"
            "<h2>Scenarios</h2><table><tr><th>scenario</th><th>outcome</th><th>s</th><th>violations</th>"
            "<th>key numbers</th></tr>%s</table>"
            "<h2>Device health</h2>%s"
            "<h2>Measurements</h2>%s"
            "<h2>Scenario details</h2>%s"
            "<p class='req'>generated by alabama hil at %s</p></main></body></html>"
            % (_e(title), CSS, _e(title), _e(run.get("board_type")), _e(run.get("core_address")),
               _e(run.get("firmware")), _e(run.get("host", "")),
               _e(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("started") or 0))),
               run.get("duration") or 0.0, probe_html(run["probe"]) if run.get("probe") else "",
               _badge("passed"), c["passed"], _badge("failed"), c["failed"] + c.get("error", 0),
               _badge("skipped"), c["skipped"], "total", len(scs), "".join(rows),
               health_html(run_health(scs)),
               measurements_html(agg, history, run.get("run_id")),
               "".join(scenario_html(sc, i) for i, sc in enumerate(scs)),
               _e(time.strftime("%Y-%m-%d %H:%M:%S"))))


# ------------------------------------------------------------------------------------------ JUnit
def render_junit(run, agg):
    suites = ET.Element("testsuites")
    _junit_suite(suites, run, agg, "alabama-hil[%s]" % run.get("board"))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def _junit_suite(suites, run, agg, name):
    scs = run.get("scenarios", [])
    c = counts(scs)
    suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(scs)),
                          failures=str(c["failed"]), errors=str(c.get("error", 0)), skipped=str(c["skipped"]),
                          time="%.3f" % (run.get("duration") or 0.0),
                          timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(run.get("started") or 0)))
    props = ET.SubElement(suite, "properties")
    for k in ("board", "board_type", "core_address", "firmware"):
        ET.SubElement(props, "property", name=k, value=str(run.get(k)))
    if run.get("status", {}).get("line"):
        ET.SubElement(props, "property", name="board_status", value=run["status"]["line"])
    for name_, a in agg.items():
        ET.SubElement(props, "property", name="median." + name_, value=_fmt(a["median"]))
    for sc in scs:
        mod = sc.get("module") or ""
        tc = ET.SubElement(suite, "testcase", classname="alabama.hil.scenarios." + mod, name=sc.get("name", ""),
                           time="%.3f" % (sc.get("duration") or 0.0))
        oc = sc.get("outcome")
        msg = sc.get("message") or ""
        first = msg.strip().splitlines()[-1] if msg.strip() else oc
        if oc == "failed":
            ET.SubElement(tc, "failure", message=first[:500]).text = msg
        elif oc == "error":
            ET.SubElement(tc, "error", message=first[:500]).text = msg
        elif oc == "skipped":
            ET.SubElement(tc, "skipped", message=first[:500])
        log = sc.get("serial_log") or ""
        if log:
            ET.SubElement(tc, "system-out").text = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
    return suite


# ------------------------------------------------------------------------------------------ writing
def write(run, report_dir):
    """Write the run's files; returns {"html", "junit", "json", "history", "latest_html", "latest_junit"}."""
    report_dir = pathlib.Path(report_dir)
    run_dir = report_dir / run["run_id"]
    run_dir.mkdir(parents=True, exist_ok=True)
    agg = aggregate(run.get("scenarios", []))
    history = update_history(report_dir, run, agg)
    page = render_html(run, agg, history)
    junit = render_junit(run, agg)
    paths = {"html": run_dir / "report.html", "junit": run_dir / "junit.xml", "json": run_dir / "run.json",
             "history": report_dir / HISTORY_FILE, "latest_html": report_dir / "report.html",
             "latest_junit": report_dir / "junit.xml"}
    paths["html"].write_text(page, encoding="utf-8")
    paths["junit"].write_text(junit, encoding="utf-8")
    paths["json"].write_text(json.dumps(dict(run, aggregate=agg), indent=1, default=str), encoding="utf-8")
    shutil.copyfile(paths["html"], paths["latest_html"])
    shutil.copyfile(paths["junit"], paths["latest_junit"])
    return paths


# ------------------------------------------------------------------------------------------ probe figures
#: A probed figure further than this factor from its estimate is flagged in the header.
PROBE_OFF_RATIO = 1.5
#: The files of a fleet's part (one per board, one for the cross-board scenarios) and a board's probe report.
PART_META, PART_SCENARIOS, PROBE_FILE = "board.json", "scenarios.jsonl", "probe.json"


class ProbeFileError(ValueError):
    """A probe file that is not `alabama board probe --json` output (format 1)."""


def read_probe(path):
    """The probe report in ``path`` (``{"probe": 1, "board", "port", "sim", "image", "figures": [...]}``)."""
    try:
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ProbeFileError("%s: cannot read it (%s)" % (path, e.strerror or e)) from None
    except UnicodeDecodeError:
        raise ProbeFileError("%s is not JSON (not UTF-8 text)" % path) from None
    except ValueError as e:
        raise ProbeFileError("%s is not JSON (%s)" % (path, e)) from None
    from alabama.board.probe import PROBE_FORMAT       # the format's one owner
    if not isinstance(data, dict) or data.get("probe") != PROBE_FORMAT or not isinstance(data.get("figures"), list) \
            or not all(isinstance(f, dict) and f.get("name") for f in data["figures"]):
        raise ProbeFileError('%s is not a probe report (format 1: {"probe": 1, "figures": [{"name": ...}, ...]})'
                             % path)
    return data


def _pv(v):
    if v is None or v == "":
        return "\u2013"
    return _fmt(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def probe_html(probe, label=""):
    """A board's probe figures for the page header: measured beside our estimate, the ratio, where it came from."""
    img = probe.get("image") or {}
    img_s = " \u00b7 ".join("%s %s" % (k, v) for k, v in sorted(img.items()) if not isinstance(v, (dict, list)))
    rows = []
    for f in probe["figures"]:
        r = f.get("ratio")
        off = isinstance(r, (int, float)) and r > 0 and (r > PROBE_OFF_RATIO or r < 1 / PROBE_OFF_RATIO)
        rows.append("<tr><td>%s</td><td class='num'>%s %s</td><td class='num'>%s</td><td class='num%s'>%s</td>"
                    "<td>%s</td><td>%s</td></tr>" % (
                        _e(f["name"]), _e(_pv(f.get("value"))), _e(f.get("unit") or ""), _e(_pv(f.get("estimate"))),
                        " off" if off else "", _e("%.2f\u00d7" % r if isinstance(r, (int, float)) else _pv(r)),
                        _e(f.get("source") or ""), _e(f.get("note") or "")))
    return ("<div class='probe'><b>%s%s</b> \u00b7 %s on %s%s%s<table><tr><th>figure</th><th>measured</th>"
            "<th>our estimate</th><th>ratio</th><th>source</th><th>note</th></tr>%s</table>%s</div>" % (
                _e(label + ": " if label else ""), "probe", _e(probe.get("board") or "?"), _e(probe.get("port") or "?"),
                " \u00b7 <span class='off'>virtual board: the simulator's figures, not a chip's</span>"
                if probe.get("sim") else "", (" \u00b7 " + _e(img_s)) if img_s else "", "".join(rows),
                "<p class='off'>the probe failed: %s</p>" % _e(probe["error"]) if probe.get("error") else ""))


# ------------------------------------------------------------------------------------------ a fleet's parts
def _write_json(path, data):
    path = pathlib.Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path):
    try:
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_part(run, part_dir):
    """A part's run fields (everything but its scenarios, which ``append_scenario`` writes as they finish)."""
    d = pathlib.Path(part_dir)
    d.mkdir(parents=True, exist_ok=True)
    old = _read_json(d / PART_META) or {}
    meta = {k: v for k, v in run.items() if k not in ("scenarios", "probe")}
    meta["crashes"] = old.get("crashes", [])        # noted by the xdist controller; a new worker keeps them
    _write_json(d / PART_META, meta)


def append_scenario(part_dir, sc):
    with open(pathlib.Path(part_dir) / PART_SCENARIOS, "a", encoding="utf-8") as f:
        f.write(json.dumps(sc, default=str) + "\n")


def note_crash(part_dir, line, replaces=None):
    """The xdist controller saw this part's worker die (its replacement goes on with the same board); ``replaces``:
    an earlier note this one rewrites (once the scenario it died in is known)."""
    d = pathlib.Path(part_dir)
    d.mkdir(parents=True, exist_ok=True)
    meta = _read_json(d / PART_META) or {}
    crashes = meta.setdefault("crashes", [])
    if replaces in crashes:
        crashes[crashes.index(replaces)] = line
    else:
        crashes.append(line)
    _write_json(d / PART_META, meta)


def read_part(part_dir, label=None, board=None):
    """A part as a run dict (scenarios included, its probe.json as ``probe``); a part whose process never ended
    its session, or never started, says so in its status."""
    d = pathlib.Path(part_dir)
    meta = _read_json(d / PART_META) or {"label": label, "board": board, "status": {
        "state": "lost", "line": "no result: its bench process never started (see the terminal output)"}}
    scs = []
    try:
        lines = (d / PART_SCENARIOS).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for ln in lines:
        try:
            scs.append(json.loads(ln))
        except ValueError:            # the last line of a process that died while writing it
            pass
    meta["scenarios"] = scs
    if meta.get("status", {}).get("state") == "running":
        meta["status"] = {"state": "lost", "line": "its bench process stopped before the end of the run (killed or "
                                                   "interrupted): the scenarios it finished are shown"}
    if (d / PROBE_FILE).exists():
        try:
            meta["probe"] = read_probe(d / PROBE_FILE)
        except ProbeFileError as e:
            meta["probe_error"] = str(e)
    return meta


def board_label(index):
    """A board's name in a fleet's report and directories: its place on the command line (0-based index)."""
    return "board %d" % (index + 1)


def board_column(b):
    """A board's column head: its label, port and type."""
    return "%s: %s (%s)" % (b.get("label"), b.get("board"), b.get("board_type"))


def board_problems(b):
    """One line per thing that went wrong with a board itself (not with a scenario)."""
    out = []
    st = b.get("status") or {}
    if st.get("state") in ("failed", "lost"):
        out.append(st["line"])
    out.extend(b.get("crashes") or [])
    if b.get("probe_error"):
        out.append("probe: " + b["probe_error"])
    return out


def render_fleet_html(fleet, aggs):
    boards, cross = fleet["boards"], fleet.get("cross")
    names = []
    for b in boards:
        for sc in b["scenarios"]:
            if sc["name"] not in names:
                names.append(sc["name"])
    head = "".join("<th>%s <span class='req'>%s</span>%s</th>" % (
        _e(board_column(b)), _e(b.get("worker") or ""),
        "".join("<div class='down'>%s</div>" % _e(x) for x in board_problems(b))) for b in boards)
    rows = []
    for n in names:
        cells = []
        for bi, b in enumerate(boards):
            j = next((j for j, sc in enumerate(b["scenarios"]) if sc["name"] == n), None)
            if j is None:
                cells.append("<td class='cell req'>not run</td>")
            else:
                cells.append("<td class='cell'><a href='#b%d-sc%d'>%s</a></td>"
                             % (bi + 1, j, _badge(b["scenarios"][j].get("outcome", "error"))))
        rows.append("<tr><td>%s</td>%s</tr>" % (_e(n), "".join(cells)))
    totals = "".join("<td>%s</td>" % " ".join("%s %d" % (k, v) for k, v in counts(b["scenarios"]).items() if v)
                     for b in boards)
    probes = "".join(probe_html(b["probe"], b.get("label") or "") for b in boards if b.get("probe"))
    if not probes:
        probes = ("<div class='probe'>no probe figures: give each board's `alabama board probe --json` output with "
                  "--probe-json FILE (once per board, in --board order)</div>")
    mnames = sorted({k for a in aggs for k in a})
    mrows = "".join("<tr><td title='%s'>%s</td>%s</tr>" % (
        _e(MEASUREMENTS.get(k, ("", "", "", ""))[3]), _e(MEASUREMENTS.get(k, (k,))[0]), "".join(
            "<td class='num'>%s</td>" % ("%s %s (n %d)" % (_fmt(a[k]["median"]), _e(MEASUREMENTS.get(k, ("", ""))[1]),
                                                            a[k]["n"]) if k in a else "\u2013") for a in aggs))
        for k in mnames)
    details = []
    for bi, b in enumerate(boards):
        details.append("<h2 id='b%d'>%s</h2>" % (bi + 1, _e(board_column(b))))
        details.extend("<p class='down'>%s</p>" % _e(x) for x in board_problems(b))
        details.extend(scenario_html(sc, j, "b%d-sc%d" % (bi + 1, j)) for j, sc in enumerate(b["scenarios"]))
    cross_html = "<p class='req'>not run</p>"
    if cross is not None:
        crow = "".join("<tr><td><a href='#x-sc%d'>%s</a></td><td>%s</td><td class='num'>%.1f</td><td>%s</td></tr>" % (
            j, _e(sc["name"]), _badge(sc.get("outcome", "error")), sc.get("duration") or 0.0,
            _e((sc.get("message") or "").strip().splitlines()[-1][:300] if (sc.get("message") or "").strip() else ""))
            for j, sc in enumerate(cross["scenarios"]))
        cross_html = ("%s<table><tr><th>scenario</th><th>outcome</th><th>s</th><th>why</th></tr>%s</table>%s" % (
            "".join("<p class='down'>%s</p>" % _e(x) for x in board_problems(cross)), crow,
            "".join(scenario_html(sc, j, "x-sc%d" % j) for j, sc in enumerate(cross["scenarios"]))))
    title = "Alabama HIL fleet run %s \u2014 %d boards" % (fleet["run_id"], len(boards))
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>%s</title><style>%s</style></head>"
            "<body><header><h1>%s</h1><div class='meta'>%s \u00b7 firmware %s \u00b7 host %s \u00b7 started %s"
            " \u00b7 %.1f s</div>%s</header><main>"
            "<h2>Scenarios \u00d7 boards</h2><table><tr><th>scenario</th>%s</tr>%s<tr><th>totals</th>%s</tr></table>"
            "<h2>Cross-board scenarios (one core, every board at once)</h2>%s"
            "<h2>Measurements (median per board)</h2><table><tr><th>measurement</th>%s</tr>%s</table>"
            "<h2>Device health</h2>%s"
            "<h2>Scenario details</h2>%s"
            "<p class='req'>generated by alabama hil at %s</p></main></body></html>"
            % (_e(title), CSS, _e(title), _e(" \u00b7 ".join(board_column(b) for b in boards)),
               _e(fleet.get("firmware")), _e(fleet.get("host", "")),
               _e(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(fleet.get("started") or 0))),
               fleet.get("duration") or 0.0, probes, head, "".join(rows), totals, cross_html,
               "".join("<th>%s</th>" % _e(b.get("label")) for b in boards), mrows,
               health_html(run_health([sc for b in boards for sc in b["scenarios"]]
                                      + (cross["scenarios"] if cross else []))),
               "".join(details), _e(time.strftime("%Y-%m-%d %H:%M:%S"))))


def write_fleet(report_dir, run_id, boards, started=None, argv=None):
    """Merge a fleet run's parts (``boards``: [(label, board)] in --board order) into the run's report.html,
    junit.xml and run.json (one column / testsuite per board, the cross-board scenarios beside them), append
    each board's medians to the history and copy the page/XML to DIR/report.html / DIR/junit.xml."""
    report_dir = pathlib.Path(report_dir)
    run_dir = report_dir / run_id
    parts = [read_part(run_dir / "boards" / str(i + 1), label, board) for i, (label, board) in enumerate(boards)]
    cross = read_part(run_dir / "fleet") if (run_dir / "fleet" / PART_META).exists() else None
    first = next((p for p in parts if p.get("firmware")), {})
    fleet = {"run_id": run_id, "started": started or first.get("started"), "host": first.get("host"),
             "firmware": first.get("firmware"), "argv": argv, "boards": parts, "cross": cross,
             "duration": round(time.time() - (started or first.get("started") or time.time()), 3)}
    aggs = [aggregate(p["scenarios"]) for p in parts]
    for p, agg in zip(parts, aggs):
        if p["scenarios"]:
            update_history(report_dir, dict(p, run_id="%s/%s" % (run_id, (p.get("label") or "").replace(" ", ""))),
                           agg)
    suites = ET.Element("testsuites")
    for p, agg in zip(parts, aggs):
        _junit_suite(suites, p, agg, "alabama-hil[%s]" % board_column(p))
    if cross is not None:
        _junit_suite(suites, cross, aggregate(cross["scenarios"]), "alabama-hil[cross-board]")
    ET.indent(suites)
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": run_dir / "report.html", "junit": run_dir / "junit.xml", "json": run_dir / "run.json",
             "history": report_dir / HISTORY_FILE, "latest_html": report_dir / "report.html",
             "latest_junit": report_dir / "junit.xml"}
    paths["html"].write_text(render_fleet_html(fleet, aggs), encoding="utf-8")
    paths["junit"].write_text(ET.tostring(suites, encoding="unicode", xml_declaration=True), encoding="utf-8")
    paths["json"].write_text(json.dumps(dict(fleet, aggregates=aggs), indent=1, default=str), encoding="utf-8")
    shutil.copyfile(paths["html"], paths["latest_html"])
    shutil.copyfile(paths["junit"], paths["latest_junit"])
    return paths, fleet


# ------------------------------------------------------------------------------------------ browser
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    for name in CHROMIUM_NAMES:
        p = shutil.which(name)
        if p:
            return p
    return None


def screenshot(html_path, png_path, width=1280, height=2400, timeout=120):
    """Render ``html_path`` in headless Chromium and write a PNG; returns the completed process.
    Raises FileNotFoundError when no Chromium is installed (``apt-get install -y chromium``)."""
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="hil-chromium-") as prof:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--no-first-run", "--user-data-dir=%s" % prof, "--hide-scrollbars",
               "--window-size=%d,%d" % (width, height), "--screenshot=%s" % os.path.abspath(png_path),
               pathlib.Path(html_path).resolve().as_uri()]
        return subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def dump_dom(html_path, timeout=120):
    """The DOM Chromium built from the page (``--dump-dom``): proves it parsed what we wrote."""
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="hil-chromium-") as prof:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--no-first-run", "--user-data-dir=%s" % prof, "--dump-dom", pathlib.Path(html_path).resolve().as_uri()]
        r = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return r.stdout.decode("utf-8", "replace")
