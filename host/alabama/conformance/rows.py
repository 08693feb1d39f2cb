"""A conformance kit's verdicts: one row per requirement ID, and how they are printed (text, JSON, JUnit XML).

Responsible for the row type, the three verdicts and their renderings; shared by the core kit (``corekit``) and any
other scorer. Must not run a check or touch the network.
"""
import json
import time
import xml.etree.ElementTree as ET

PASS, FAIL, NOT_OBSERVABLE = "pass", "fail", "not observable"
#: Version of the --json layout (a tool reading it checks this first).
JSON_FORMAT = 1


class Row:
    """One requirement's verdict: ``rid`` (REQUIREMENTS.md ID), ``title`` (what was checked), ``verdict``,
    ``detail`` (one line: why), ``timeline`` (the frames that show it, as text lines), ``seconds`` it took."""

    __slots__ = ("rid", "title", "verdict", "detail", "timeline", "seconds")

    def __init__(self, rid, title, verdict, detail="", timeline=(), seconds=0.0):
        self.rid, self.title, self.verdict, self.detail = rid, title, verdict, detail
        self.timeline, self.seconds = list(timeline), seconds

    def as_dict(self):
        return {"id": self.rid, "title": self.title, "verdict": self.verdict, "detail": self.detail,
                "timeline": self.timeline, "seconds": round(self.seconds, 3)}

    def __repr__(self):
        return "Row(%s %s: %s)" % (self.rid, self.verdict, self.detail)


def counts(rows):
    out = {PASS: 0, FAIL: 0, NOT_OBSERVABLE: 0}
    for r in rows:
        out[r.verdict] += 1
    return out


def render_text(rows, target, timelines=True, kind="core"):
    """The table a person reads: one line per row, and under each failure the frames that show it. ``kind``:
    "core" (the kit scored the core at ``target``) or "satellite" (the satellite that connected to ``target``)."""
    width = max([len(r.rid) for r in rows] + [4])
    head = {"satellite": "conformance of the satellite that connected to %s"}.get(kind, "conformance of the %s at %%s"
                                                                                  % kind)
    lines = [head % target, ""]
    for r in rows:
        lines.append("%-*s  %-14s  %s%s" % (width, r.rid, r.verdict, r.title, (": " + r.detail) if r.detail else ""))
        if timelines and r.verdict == FAIL and r.timeline:
            lines += ["%*s    %s" % (width, "", t) for t in r.timeline[-12:]]
    c = counts(rows)
    lines += ["", "%d passed, %d failed, %d not observable" % (c[PASS], c[FAIL], c[NOT_OBSERVABLE])]
    return "\n".join(lines)


def as_json(rows, target, kind):
    return json.dumps({"conformance": JSON_FORMAT, "kind": kind, "target": target, "when": int(time.time()),
                       "counts": counts(rows), "rows": [r.as_dict() for r in rows]}, indent=1)


def junit_xml(rows, target, kind):
    """One testsuite, one testcase per row: a failure is <failure>, not observable is <skipped>."""
    c = counts(rows)
    suite = ET.Element("testsuite", name="alabama-conformance[%s %s]" % (kind, target), tests=str(len(rows)),
                       failures=str(c[FAIL]), skipped=str(c[NOT_OBSERVABLE]), errors="0",
                       time="%.3f" % sum(r.seconds for r in rows))
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname="conformance.%s" % kind, name="%s %s" % (r.rid, r.title),
                             time="%.3f" % r.seconds)
        if r.verdict == FAIL:
            f = ET.SubElement(case, "failure", message=r.detail[:500])
            f.text = "\n".join(r.timeline)
        elif r.verdict == NOT_OBSERVABLE:
            ET.SubElement(case, "skipped", message=r.detail[:500])
    return ET.tostring(suite, encoding="unicode")
