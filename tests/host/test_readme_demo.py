"""The README's first screen tells the truth (issue 36 item 5): its demo transcript is what `alabama demo`
prints today (a fresh run compared with the block, timings, ports, keys and counts masked; rerun
tools/readme_demo.py when it drifts), "two commands" are two, and every phrase it says the assistant
understands is one the speech brain's intent table parses to the intent it names."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
EXE = os.path.join(os.path.dirname(sys.executable), "alabama")

ROW = re.compile(r"^\s*\d+\.\d+s\s+(Sat → Core|Core → Sat)\s+(\w+)\s+\{(.*)\}\s+(\d+ B.*)$")
HEX = re.compile(r"\b[0-9a-f]{8,}\b")
NUM = re.compile(r"\d+")


def block():
    i = README.index("<!-- demo-transcript:begin")
    j = README.index("<!-- demo-transcript:end -->")
    body = README[i:j]
    return body[body.index("```\n") + 4:body.rindex("```")]


def mask(s):
    s = re.sub(r"/\S*?alabama-demo-[^/\s]+", "DIR", s)
    s = re.sub(r"-> \S+\.wav", "-> WAV", s)
    return NUM.sub("N", HEX.sub("HEX", s))


def shape(text):
    """(lines, streams, ping rounds): every line but the StreamChunk rows, the '⋯' runs and the Ping rounds
    (their interleaving with the chunks is timing), masked; the chunk streams (direction, id); the Pings."""
    lines, streams, pings = [], [], 0
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("⋯"):
            continue
        m = ROW.match(raw)
        if m is None:
            lines.append(mask(" ".join(raw.split())))
            continue
        who, name, body, size = m.groups()
        if name == "StreamChunk":
            s = (who, mask(body.split(",")[0]))           # the ids depend on how many Pings went first
            if s not in streams:
                streams.append(s)
        elif name == "Ping":
            pings += 1
        elif name != "PingResponse":
            lines.append(mask("%s %s {%s} %s" % (who, name, body, size)))
    return lines, streams, pings


def brain_of(text):
    m = re.search(r"brain (\w+)", text)
    return m.group(1) if m else None


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    p = subprocess.run([EXE, "demo", "--out", str(tmp / "reply.wav")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_readme_demo_transcript_is_what_the_demo_prints(run):
    readme = block()
    if brain_of(run) != brain_of(readme):
        pytest.skip("the README's transcript is the %s brain's; here the demo runs the %s brain (install "
                    "espeak-ng for the speech brain)" % (brain_of(readme), brain_of(run)))
    want, got = shape(readme), shape(run)
    assert got[2] == want[2] == 4, "the board's four clock Ping rounds"
    assert got[1] == want[1], "the StreamChunk streams"
    assert got[0] == want[0], ("README.md's demo transcript drifted from `alabama demo`: rerun "
                               "`.venv/bin/python tools/readme_demo.py`\n" + "\n".join(
                                   "%s\n  README: %s\n  run:    %s" % (i, a, b) for i, (a, b) in
                                   enumerate(zip(want[0], got[0])) if a != b))


def test_shape_sees_a_drift():
    """The comparison is not blind: a changed frame, a missing Ping round, another stream all show."""
    readme = block()
    base = shape(readme)
    assert base[0] and base[2] == 4 and len(base[1]) == 2
    assert shape(readme.replace("PlaybackDone", "PlaybackEnd"))[0] != base[0]
    assert shape(readme.replace("Hello   ", "Hullo   ", 1))[0] != base[0]
    ping = next(line for line in readme.splitlines() if " Ping " in line)
    assert shape(readme.replace(ping + "\n", "", 1))[2] == 3
    assert shape(readme.replace("Core → Sat  StreamChunk", "Sat → Core  StreamChunk"))[1] != base[1]
    assert shape(readme.replace("0.001s", "0.002s"))[0] == base[0]           # timings are not the contract


def test_the_two_commands_are_two():
    sec = README[README.index("## Two commands"):]
    first = sec[sec.index("```sh\n") + 6:sec.index("```", sec.index("```sh\n") + 6)]
    cmds = [line.split("#")[0].strip() for line in first.splitlines() if line.split("#")[0].strip()]
    assert cmds == ["make demo", "make test"]


def test_what_the_assistant_understands_is_what_the_intent_table_parses():
    from alabama.speech import intents
    sec = README[README.index("**What the assistant understands**"):]
    sec = sec[:sec.index("\n\n")]
    said = re.findall(r"^- (\w+): (.*)$", sec, re.M)
    assert [k for k, _ in said] == [intents.TIME, intents.TIMER, intents.LIGHT, intents.STOP, intents.FREE]
    for name, line in said:
        phrases = re.findall(r"\"([a-zA-Z ]+)\"", line.split("→")[0])      # what is said, not the answer
        if name == intents.FREE:
            continue
        assert phrases, line
        for ph in phrases:
            got = intents.parse(ph.replace(" N ", " five "), ["light.set"])
            assert got.name == name, (ph, got)
