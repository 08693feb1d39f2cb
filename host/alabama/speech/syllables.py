"""How many syllables a timer's number took to say, from a forced alignment of "set a timer for N minutes".

Responsible for the "-ty" evidence of the timer's number (docs/speech.md, "The number's syllables"): words' syllable
counts from the pronunciation dictionary (its vowel phones), the syllables the number took in the speaker's own time
(from the end of the lead "set a timer for" to the end of the sentence, in units of the lead's time per syllable,
less the syllables of the "minute(s)" after it), and each candidate number's penalty for disagreeing with it. Not
responsible for aligning (speech/second_opinion.py decodes, pocketsphinx's word segments at 10 ms) nor for choosing
the number (``whisper.choose_number`` adds the penalty). "forty" has two syllables and "four" one: under noise the
unstressed "-ty" is masked, but it still takes its time. Pure functions; any alignment it cannot read: no evidence.
"""
#: the vowel phones of the CMU dictionary's set (pocketsphinx's en-us model): one syllable each
VOWELS = frozenset(("AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"))
#: log-prob units per syllable of disagreement, subtracted from a candidate's score (the timer pool of seeds 40-55,
#: 1,116 clips, with whisper.SECOND_FLOOR 3.0: 0.4 / 0.5 / 0.6 -> 1076 / 1075 / 1075 right, main's rule 1045)
SYLLABLE_WEIGHT = 0.5
MIN_LEAD_FRAMES = 20            # a lead aligned to under 0.2 s is no measure of the speaker's rate: no evidence
MAX_HEARD = 5.0                 # a number slot longer than this: the alignment ran into noise, no evidence


def count(phones):
    """Syllables of a pronunciation ("F AO R T IY" -> 2), by its vowel phones; 0 for None or ""."""
    return sum(p in VOWELS for p in (phones or "").split())


def _word(name):
    """A segment's dictionary word: "minutes(2)" -> "minutes"; None for silence, fillers and null transitions."""
    if not name or name[0] in "<([+":
        return None
    return name.split("(")[0]


def heard(segments, lead, syllables_of):
    """The syllables the number took, measured: ``segments`` [(word, start_frame, end_frame), ...] of an alignment
    of ``lead`` + number + the words after it; ``syllables_of(word)`` -> its syllable count. The time from the
    lead's end to the last word's end, over the lead's time per syllable, less the syllables of the words after the
    number. None when the alignment does not start with the lead's words, has no number, or is too short or long
    to measure (the caller then abstains)."""
    words = [(w, s, e) for w, s, e in ((_word(n), s, e) for n, s, e in segments or ()) if w is not None]
    lead = lead.split()
    if len(words) < len(lead) + 1 or [w for w, _, _ in words[:len(lead)]] != lead:
        return None
    start, end = words[0][1], words[len(lead) - 1][2]
    lead_syllables = sum(syllables_of(w) for w in lead)
    if end - start + 1 < MIN_LEAD_FRAMES or lead_syllables <= 0:
        return None
    per_syllable = (end - start + 1) / float(lead_syllables)
    after = sum(syllables_of(w) for w, _, _ in words[len(lead) + 1:])
    got = (words[-1][2] - end) / per_syllable - after
    return got if 0.0 < got <= MAX_HEARD else None


def penalties(measured, syllables):
    """{number: SYLLABLE_WEIGHT x |measured - its syllables|} for ``syllables`` {number: count}; {} when nothing was
    measured (``measured`` None): the choice is then left to the recognisers' scores."""
    if measured is None:
        return {}
    return {n: SYLLABLE_WEIGHT * abs(measured - k) for n, k in syllables.items()}
