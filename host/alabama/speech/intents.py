"""Intent layer: the grammar the recogniser listens for and the (name, slots) read from a transcript.

Responsible for the closed set of commands the reference brain knows (the time, a timer, a light
on/off that names a tool the board declares, stop) as one table from which both the JSGF grammar
and the parser are derived, and for the free-form fallback. Pure functions: no audio, no decoder,
no session; what the core does with an intent (an Invoke, a reply) is not decided here.
"""
import re
from typing import NamedTuple

TIME = "time"
TIMER = "timer"
LIGHT = "light"
STOP = "stop"
FREE = "free_form"
#: the confidence under which a transcript is not acted on (speech/recognizer.py maps its scores onto it)
LOW_CONFIDENCE = 0.5

# spoken numbers the timer grammar accepts -> minutes
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
           "nine": 9, "ten": 10, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40, "sixty": 60}
# the fixed command forms (the grammar and the parser both read these)
TIME_FORMS = ("what time is it", "what is the time", "tell me the time")
STOP_FORMS = ("stop", "cancel")
#: the words of a timer command before its number
TIMER_LEAD = "set a timer for"
# a declared tool is a light when one of its name's parts is one of these
LIGHT_WORDS = ("light", "lights", "led", "lamp")


class Intent(NamedTuple):
    name: str
    slots: dict


def light_tool(tool_names):
    """The first declared tool whose name (split on . _ -) has a light word, or None."""
    for name in tool_names:
        if any(part in LIGHT_WORDS for part in re.split(r"[._\-]", name.lower())):
            return name
    return None


def grammar(tool_names=()):
    """The JSGF grammar for pocketsphinx: one public rule, an alternative per intent.

    The light rule is present only when the board declares a light tool (else the recogniser
    cannot hear a command the core could not carry out)."""
    nums = " | ".join(NUMBERS)
    rules = ["<time> = %s;" % " | ".join(TIME_FORMS),
             "<timer> = set a timer for <num> (minute | minutes);",
             "<num> = %s;" % nums,
             "<stop> = %s;" % " | ".join(STOP_FORMS)]
    alts = ["<time>", "<timer>", "<stop>"]
    if light_tool(tool_names):
        rules.append("<light> = turn [the] light (on | off) | turn (on | off) the light;")
        alts.append("<light>")
    return "#JSGF V1.0;\ngrammar alabama;\npublic <command> = %s;\n%s\n" % (" | ".join(alts), "\n".join(rules))


#: minutes -> the spoken number the grammar uses ("20" -> "twenty"); a number not here stays digits (no timer)
_SPOKEN = {v: k for k, v in NUMBERS.items()}
#: a word (letters, inner apostrophes: "don't") or a number (inner separators kept: "2.5", "1,000" are not "2", "5")
_TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*|\d+(?:[.,:]\d+)*")


def normalise(text):
    """A transcript as the grammar writes it: lower case, punctuation and hyphens gone, digits that name a grammar
    number spelled out ("Set a timer for 20 minutes." -> "set a timer for twenty minutes"). The one place a real
    recogniser's text (faster-whisper, a Wyoming server) is brought to the grammar's forms."""
    words = _TOKEN.findall(text.lower().replace("-", " "))
    return " ".join(_SPOKEN.get(int(w), w) if w.isdigit() else w for w in words)


_TIMER = re.compile(r"^set a timer for (\w+) minutes?$")
_LIGHT = re.compile(r"^turn (?:the )?light (on|off)$|^turn (on|off) the light$")


def parse(text, tool_names=()):
    """Intent of a transcript: the command forms the grammar produces, after ``normalise`` (case, punctuation,
    digits), else FREE. FREE carries the normalised text in slots["text"]; a light command with no declared light
    tool is FREE."""
    t = normalise(text)
    if t in TIME_FORMS:
        return Intent(TIME, {})
    if t in STOP_FORMS:
        return Intent(STOP, {})
    m = _TIMER.match(t)
    if m and m.group(1) in NUMBERS:
        return Intent(TIMER, {"minutes": NUMBERS[m.group(1)]})
    m = _LIGHT.match(t)
    tool = light_tool(tool_names)
    if m and tool:
        return Intent(LIGHT, {"tool": tool, "on": (m.group(1) or m.group(2)) == "on"})
    return Intent(FREE, {"text": t})


def examples(tool_names=(), number="twenty"):
    """One sentence per command form the board can use (light forms only with a declared light tool), a timer with
    ``number``: what a free-text recogniser is primed with (speech/whisper.py builds its prompt from these)."""
    out = list(TIME_FORMS) + ["set a timer for %s minutes" % number]
    if light_tool(tool_names):
        out += ["turn on the light", "turn off the light"]
    return out + list(STOP_FORMS)


def sentences(tool_names=()):
    """Every command sentence the board can use, in the grammar's words ("minute" after "one" only): what a free
    transcript that is not a command may be snapped to (speech/whisper.py)."""
    out = list(TIME_FORMS) + [timer_sentence(n) for n in NUMBERS]
    if light_tool(tool_names):
        out += ["turn %slight %s" % (the, s) for the in ("the ", "") for s in ("on", "off")]
        out += ["turn %s the light" % s for s in ("on", "off")]
    return out + list(STOP_FORMS)


def timer_sentence(number):
    """The grammar's timer sentence for a spoken number ("one" -> "set a timer for one minute")."""
    return "%s %s minute%s" % (TIMER_LEAD, number, "" if NUMBERS[number] == 1 else "s")


def understand(text, confidence, tool_names=(), low_confidence=LOW_CONFIDENCE):
    """What the brain acts on: the Intent of a transcript confident enough (>= low_confidence), else None (the
    brain says it did not catch that). FREE here is what gets echoed as "You said: ..."."""
    if not text or confidence < low_confidence:
        return None
    return parse(text, tool_names)
