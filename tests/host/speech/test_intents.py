"""intents: the grammar and the parser come from one table; a light needs a declared light tool."""
from alabama.speech import intents
from alabama.speech.intents import Intent


def test_commands():
    tools = ["device.info", "light.set"]
    assert intents.parse("what time is it", tools) == Intent("time", {})
    assert intents.parse("Set a timer for five minutes", tools) == Intent("timer", {"minutes": 5})
    assert intents.parse("set a timer for one minute", tools) == Intent("timer", {"minutes": 1})
    assert intents.parse("turn the light on", tools) == Intent("light", {"tool": "light.set", "on": True})
    assert intents.parse("turn off the light", tools) == Intent("light", {"tool": "light.set", "on": False})
    assert intents.parse(" stop ", tools) == Intent("stop", {})


def test_free_form_and_partials():
    assert intents.parse("turn the light on", ["device.info"]) == Intent("free_form", {"text": "turn the light on"})
    assert intents.parse("set a timer for", ["x"]).name == "free_form"          # a grammar partial is no command
    assert intents.parse("set a timer for banana minutes").name == "free_form"
    assert intents.parse("") == Intent("free_form", {"text": ""})


def test_light_tool_matching():
    assert intents.light_tool(["device.set_volume", "kitchen_lamp.set"]) == "kitchen_lamp.set"
    assert intents.light_tool(["led.ring", "light.set"]) == "led.ring"
    assert intents.light_tool(["device.info", "flight.mode"]) is None         # parts, not substrings


def test_grammar_has_light_rule_only_with_a_light_tool():
    assert "<light>" in intents.grammar(["light.set"])
    assert "<light>" not in intents.grammar(["device.info"])
    assert intents.grammar().startswith("#JSGF V1.0;")


def test_issue40_a_real_recognisers_text_parses():
    """issue 40 item 3: faster-whisper (embedded or behind Wyoming) writes "Set a timer for 20 minutes." — case,
    punctuation, hyphens and digits are brought to the grammar's forms in one place (intents.normalise)."""
    tools = ["light.set"]
    assert intents.parse("Set a timer for 20 minutes.", tools) == Intent("timer", {"minutes": 20})
    assert intents.parse("Set a timer for 1 minute!", tools) == Intent("timer", {"minutes": 1})
    assert intents.parse("What time is it?", tools) == Intent("time", {})
    assert intents.parse("Tell me the time...", tools) == Intent("time", {})
    assert intents.parse("Turn off the light.", tools) == Intent("light", {"tool": "light.set", "on": False})
    assert intents.parse("Turn the light-on", tools) == Intent("light", {"tool": "light.set", "on": True})
    assert intents.parse("Cancel.", tools) == Intent("stop", {})
    assert intents.parse("  STOP!  ", tools) == Intent("stop", {})


def test_issue40_a_number_not_in_the_grammar_makes_no_timer():
    for text, heard in (("Set a timer for 25 minutes.", "set a timer for 25 minutes"),
                        ("Set a timer for 2.5 minutes.", "set a timer for 2.5 minutes"),
                        ("Set a timer for 1,000 minutes.", "set a timer for 1,000 minutes"),
                        ("Set a timer for twenty-one minutes.", "set a timer for twenty one minutes")):
        assert intents.parse(text) == Intent("free_form", {"text": heard})
    assert intents.normalise("Don't turn it on, OK?") == "don't turn it on ok"
