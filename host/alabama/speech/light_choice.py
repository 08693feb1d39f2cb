"""A light command decided from both recognisers' scores, not from whisper's free reading alone (issue 40 item 3).

Responsible for the light sentences the board accepts (``intents.sentences`` that parse as LIGHT), for the "near a
light command" gate on whisper's text, for pocketsphinx's path score of each light sentence over an utterance
(``PathScores``) and for the rule that picks one (``choose``: whisper's forced score of each sentence plus
PS_WEIGHT x pocketsphinx's, among those whisper finds plausible beside its own reading). Not responsible for
decoding with whisper (speech/whisper.py forces its readings and calls this), nor for any other command. Why: the
prompt carries "Turn on the light. Turn off the light." and whisper's free reading leans to them, so "turn the light
off" at 10 dB was written "Turn on the light." (the lamp goes on when told off) or "Join the light door."
(docs/speech.md, "The light command from both recognisers").
"""
import math

from . import intents

#: the word every light sentence of the grammar has: whisper's text is near a light command when it has it
LIGHT_WORD = "light"
#: weight of pocketsphinx's per-frame path score of a light sentence against whisper's mean log-prob of it, and the
#: plausible set: whisper's forced score of the sentence within MARGIN of its own reading's and >= CUT. Chosen on a
#: pool of every light command clip of seeds 40 (tuning split) and 41-55 (held-out, all seen), 477 clips, and the
#: out-of-grammar and junk clips the gate fires on (docs/speech.md): weight 0.05-0.2 x cut -1.0..-1.2 x margin >= 0.8
#: gives 467-470 right (main 449), no sentence or junk taken that main's rule does not take; a cut of -1.5 takes
#: junk, -1.2 with a margin of 1.0 a sentence ("Turn left after the next light.")
PS_WEIGHT = 0.1
MARGIN = 0.8
CUT = -1.0


def sentences(tool_names=()):
    """The light sentences the board accepts, in the grammar's words (none without a declared light tool)."""
    return [s for s in intents.sentences(tool_names) if intents.parse(s, tool_names).name == intents.LIGHT]


def near(text):
    """True when whisper's text has the grammar's light word ("Join the light door.", "Turn on the light.")."""
    return LIGHT_WORD in intents.normalise(text).split()


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def choose(free, whisper, ps, weight=PS_WEIGHT, margin=MARGIN, cut=CUT):
    """The light sentence to take, or None (abstain: the text stays as it was). ``free``: whisper's forced mean
    log-prob of its own reading; ``whisper`` {sentence: its forced mean log-prob of that light sentence}; ``ps``
    {sentence: pocketsphinx's per-frame path score, or None: no path}. The plausible sentences are those whisper
    scores within ``margin`` of ``free`` and at least ``cut``; among them the highest whisper score plus ``weight`` x
    pocketsphinx's (relative to its best over the plausible ones) wins, over the sentences pocketsphinx has a path
    for (whisper's score alone when it has none). A score that is missing or not a number abstains."""
    if not _finite(free) or not whisper or not all(_finite(v) for v in whisper.values()):
        return None
    plausible = [s for s, v in whisper.items() if v >= free - margin and v >= cut]
    if not plausible:
        return None
    ps = ps or {}
    heard = [s for s in plausible if _finite(ps.get(s))]
    if not heard:
        return max(plausible, key=whisper.get)
    top = max(ps[s] for s in heard)
    return max(heard, key=lambda s: whisper[s] + weight * (ps[s] - top))


class PathScores:
    """Pocketsphinx's path score of each light sentence's own one-sentence grammar over an utterance (a search per
    sentence on a grammar decoder of its own, built on first use from the second opinion's models)."""

    def __init__(self, second, tool_names=()):
        self.second = second
        self.sentences = sentences(tool_names)
        self._decoder = None

    def __call__(self, pcm):
        """{sentence: path score per frame (pocketsphinx's log units), or None when no path reaches its end}."""
        from .frontend import clean
        from .recognizer import decode, path_score, floor
        if self._decoder is None:
            d = self.second.models().grammar_decoder()
            for i, s in enumerate(self.sentences):
                d.add_jsgf_string("light%d" % i, "#JSGF V1.0;\ngrammar light;\npublic <light> = %s;\n" % s)
            self._decoder = d
        d, pcm, out = self._decoder, floor(clean(pcm)), {}
        for i, s in enumerate(self.sentences):
            d.activate_search("light%d" % i)
            words = decode(d, pcm)
            score, _ = path_score(d)
            out[s] = score / max(1, d.n_frames()) if words and score is not None else None
        return out
