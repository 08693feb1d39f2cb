"""Issue 40 item 3, the timer number's syllables (speech/syllables.py): counted from the dictionary's vowels, measured
from a forced alignment in the speaker's own time, and the rule that weighs them (``whisper.choose_number``). The
numbers are seen held-out seed 47's "forty" at 5 dB (hum, en-us+m4, 125 wpm): pocketsphinx's alignment of its best
path and both recognisers' cached scores. Bad alignments give no evidence: the rule abstains, never raises."""
import pytest

from alabama.speech import intents, syllables, whisper

#: the dictionary's pronunciations of the words involved (pocketsphinx's en-us cmudict)
PHONES = {"set": "S EH T", "a": "AH", "timer": "T AY M ER", "for": "F AO R", "four": "F AO R",
          "forty": "F AO R T IY", "thirty": "TH ER D IY", "minute": "M IH N AH T", "minutes": "M IH N AH T S"}


def syl(word):
    return syllables.count(PHONES[word])


#: seed 47 held/0047.wav, pocketsphinx's path of "set a timer for forty minutes" (its best of four / thirty / forty)
FORTY_5DB = [("<sil>", 0, 64), ("set", 65, 101), ("a", 102, 110), ("timer", 111, 160), ("for", 161, 184),
             ("forty", 185, 238), ("(NULL)", 238, 238), ("minute(4)", 239, 284), ("(NULL)", 284, 284),
             ("<sil>", 285, 406)]
#: the same clip's scores: whisper's whole sentence under the numberless prompt, pocketsphinx's per-frame path score
WHOLE = {"four": -0.507, "thirty": -0.925, "forty": -0.686}
PS = {"four": -20.449, "thirty": -24.297, "forty": -19.703}


def test_issue40_syllables_counted_from_the_dictionarys_vowels():
    assert [syl(w) for w in ("four", "forty", "thirty", "timer", "a", "minutes")] == [1, 2, 2, 2, 1, 2]
    assert syllables.count("S EH V N") == 1 and syllables.count("") == 0 and syllables.count(None) == 0


def test_issue40_syllables_heard_in_the_speakers_own_time():
    """The lead "set a timer for" took 120 frames for its 5 syllables (24 a syllable); from its end to the end of
    "minute" 100 frames = 4.17 syllables, less minute's 2: the number took 2.17 — forty's two, not four's one."""
    got = syllables.heard(FORTY_5DB, intents.TIMER_LEAD, syl)
    assert got == pytest.approx(100 / 24.0 - 2)
    pen = syllables.penalties(got, {"four": 1, "forty": 2})
    assert pen["forty"] < pen["four"]
    assert pen["four"] - pen["forty"] == pytest.approx(syllables.SYLLABLE_WEIGHT * 1.0)


def test_issue40_syllables_move_the_timer_number():
    """Both recognisers' scores alone say four (whisper's whole sentence prefers it by 0.18, pocketsphinx's path
    prefers forty by 0.75 a frame x PS_WEIGHT); the "-ty" the slot took makes it forty. No measure: four again."""
    assert whisper.choose_number(WHOLE, PS) == "four"
    pen = syllables.penalties(syllables.heard(FORTY_5DB, intents.TIMER_LEAD, syl),
                              {n: syl(n) for n in WHOLE})
    assert whisper.choose_number(WHOLE, PS, pen) == "forty"
    assert whisper.choose_number(WHOLE, PS, {}) == "four"
    assert whisper.choose_number(WHOLE, PS, syllables.penalties(None, {n: syl(n) for n in WHOLE})) == "four"


@pytest.mark.parametrize("segments", [
    None,                                                       # the search found no path
    [],
    [("<sil>", 0, 300)],                                        # silence only
    FORTY_5DB[:4],                                              # the lead cut short: no number after it
    [("set", 0, 3), ("a", 4, 5), ("timer", 6, 9), ("for", 10, 12), ("forty", 13, 40), ("minutes", 41, 60)],  # 0.13 s
    [("set", 0, 20), ("a", 21, 25), ("timer", 26, 45), ("for", 46, 60), ("forty", 61, 700), ("minutes", 701, 900)],
    [("a", 0, 20), ("timer", 26, 45), ("for", 46, 60), ("forty", 61, 90), ("minutes", 91, 130)],   # not the lead
])
def test_issue40_syllables_abstain_on_an_alignment_they_cannot_read(segments):
    assert syllables.heard(segments, intents.TIMER_LEAD, syl) is None
    assert syllables.penalties(None, {"four": 1}) == {}


def test_issue40_syllables_lead_without_vowels_abstains():
    assert syllables.heard(FORTY_5DB, intents.TIMER_LEAD, lambda w: 0) is None


@pytest.mark.parametrize("seconds", [0.05, 0.6])
def test_issue40_syllables_no_path_no_penalty(seconds):
    """Pocketsphinx's searches over audio with no timer in it (silence, too short to hold one): no path, so nothing
    measured and no penalty — the number is left to whisper's scores, and nothing raises."""
    from alabama.speech import second_opinion
    second = second_opinion.make(("light.set",))
    if second is None:
        pytest.skip("pocketsphinx / webrtc-noise-gain not installed: whisper hears alone")
    second.syllable_penalties = {"stale": 1.0}
    scores = second.timer_scores(bytes(int(seconds * 16000) * 2), ["four", "forty"])
    assert scores == {"four": None, "forty": None}
    assert second.syllable_penalties == {}
    assert whisper.choose_number({"four": -0.5, "forty": -0.7}, scores, second.syllable_penalties) == "four"
