"""Shared fixtures for the speech layer: one model set and one recogniser per test session (loading
the acoustic model costs ~0.5 s), and espeak-ng/sox skips with the package to install."""
import os
import shutil

import pytest

pytest.importorskip("pocketsphinx", reason="pip install pocketsphinx")
if not (shutil.which("espeak-ng") and shutil.which("sox")):
    if os.environ.get("CI"):             # CI installs both: a missing tool there is a broken image, not a skip
        raise RuntimeError("speech tests synthesize utterances: apt-get install espeak-ng sox")
    pytest.skip("speech tests synthesize utterances: apt-get install espeak-ng sox", allow_module_level=True)

from alabama.speech import audio, recognizer  # noqa: E402

TOOLS = ("device.info", "light.set", "device.set_volume")


def corpus_module():
    """tools/speech/corpus.py (it renders the accuracy corpus's clips: tests use a few of them by their parameters)."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[3] / "tools" / "speech" / "corpus.py"
    spec = importlib.util.spec_from_file_location("speech_corpus", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def models():
    return recognizer.SpeechModels(tool_names=TOOLS)


@pytest.fixture(scope="session")
def rec(models):
    return recognizer.Recognizer(models)


@pytest.fixture(scope="session")
def utterance():
    cache = {}

    def get(text):
        if text not in cache:
            cache[text] = audio.synth(text)
        return cache[text]
    return get
