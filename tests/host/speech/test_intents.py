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
