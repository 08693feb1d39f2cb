"""Responsible for the command line's own mistakes: the parser whose every error is ONE line (a typo'd command, a
missing argument, a value of the wrong type) and the value types that refuse a wrong sign or range before a
command runs. Not for the commands' checks of what a value names (a file: UsageError; a port another program
holds is the world's state, not a mistake: errors.listen_error, status 1)."""
import argparse
import difflib
import math
import re
import sys

#: What the one line starts with (the same as cli.py's for an AlabamaError).
PREFIX = "alabama: error: "

#: Set by the Makefile for a target that runs alabama: how each option was typed there, "--port=PORT --board=BOARD"
#: (`make flash PORT=...`), so that the one line names PORT=, which the person typed, not --port, which they never saw.
MAKE_VARS_ENV = "ALABAMA_MAKE_VARS"

#: An option's name in a line; a span that is a command to run (in backticks, or "alabama CMD ..." up to the end
#: of its clause), where an option stays as alabama spells it.
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w-])")
_COMMAND = re.compile(r"`[^`]*`|\balabama [a-z][^;:()`]*")
_EMPTY = re.compile(r"argument (--[a-z][a-z0-9-]*): expected one argument")


def as_typed(line, env=None):
    """LINE with every option the Makefile passed (MAKE_VARS_ENV) named as the make variable the person typed: PORT=
    for --port; options inside a command to run stay as they are. Without the variable: LINE as it is."""
    import os
    spelled = {}
    for pair in (os.environ if env is None else env).get(MAKE_VARS_ENV, "").split():
        option, _, var = pair.partition("=")             # "--allow-mpy=ALLOW_MPY=1": a switch is set to a value
        if var:
            spelled[option] = var if "=" in var else var + "="
    if not spelled:
        return line
    line = _EMPTY.sub(lambda m: ("%s is empty: give it a value" % spelled[m.group(1)]) if m.group(1) in spelled
                      else m.group(0), line)
    out, at = [], 0
    for cmd in list(_COMMAND.finditer(line)) + [None]:
        end = cmd.start() if cmd else len(line)
        part = _OPTION.sub(lambda m: spelled.get(m.group(0), m.group(0)), line[at:end])
        out.append(re.sub(r"(?<==) (?=<)", "", part))     # "--bind <address>" -> "BIND=<address>"
        if cmd:
            out.append(cmd.group(0))
            at = cmd.end()
    return "".join(out)


#: Options whose command says its own line for an empty value ("" for --wake-phrase is no wake word; the Wi-Fi
#: options and --wake-word name what they take). Any other option given "" or blanks (a variable left empty in a
#: script, `--port "$PORT"`) is refused by the parser: read as "not given", it flashed the official image for
#: `--firmware ""` and minted a token in the default core directory for `core token --data ""`.
SAYS_EMPTY = ("--wake-phrase", "--wake-word", "--wifi-ssid", "--wifi-passphrase", "--say")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser (and, through add_subparsers, every sub-parser) whose error is one line and status 2.

    argparse prints the usage (several lines for a command with many options) and then the error; a person needs
    the error and where the options are listed."""

    def error(self, message):
        self.exit(2, "%s%s\n" % (PREFIX, as_typed(one_line(self.prog, message))))

    def _get_values(self, action, arg_strings):
        """As argparse's, but an option's value that is empty or blank is the one line saying so (SAYS_EMPTY aside)."""
        if action.option_strings and arg_strings and not any(a.strip() for a in arg_strings) \
                and not set(action.option_strings) & set(SAYS_EMPTY):
            self.error("argument %s: the value is empty: give %s%s" % (
                "/".join(action.option_strings), action.metavar or action.dest.upper(),
                "" if action.required else ", or leave %s out" % action.option_strings[-1]))
        return super()._get_values(action, arg_strings)

    def add_subparsers(self, **kwargs):
        """As argparse's; and this group run without a command says so in one line naming its commands, status 2
        (as git and pip do), where argparse would run nothing and a hand-made default printed the whole help."""
        action = super().add_subparsers(**kwargs)
        self.set_defaults(func=lambda args: self.needs_command(action))
        return action

    def needs_command(self, action):
        """The one line for this group run without one of ACTION's commands; returns the status, 2."""
        names = [a.dest for a in action._choices_actions]       # those --help lists (an old spelling is hidden)
        sys.stderr.write("%s%s needs a command: %s (`%s --help` says what each does)\n"
                         % (PREFIX, self.prog, ", ".join(names), self.prog))
        return 2

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(ns, "_extras_prog"):      # the innermost (sub-)parser that was left them
            ns._extras_prog = self.prog
        return ns, extras

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but arguments nobody takes are said against the command they were given to."""
        ns, extras = self.parse_known_args(args, namespace)
        prog = vars(ns).pop("_extras_prog", self.prog)
        if extras:
            self.exit(2, "%s%s\n" % (PREFIX, as_typed(one_line(prog, "unrecognized arguments: %s" % " ".join(extras)))))
        return ns


#: Words a person types for one of our commands that spelling alone does not reach (`alabama core pair`): the
#: command each may mean, where the group has it.
SYNONYMS = {"pair": ("token", "approve"), "pairing": ("token",), "ls": ("list",), "info": ("show",),
            "check": ("validate",), "start": ("serve",), "run": ("serve",), "install": ("deploy",),
            "upload": ("deploy",), "update": ("ota",), "upgrade": ("ota",), "monitor": ("logs",),
            "console": ("repl",), "shell": ("repl",), "simulate": ("sim",)}


#: Words a person types for what is not a command of that group, with where it is (`alabama fleet`, `alabama
#: provision wifi`); a command of alabama's own typed under a group (`alabama board repl`) is found without a row here.
ELSEWHERE = {"fleet": "several boards at once are a fleet of `alabama hil`: `alabama hil --board PORT --board PORT` "
                      "(docs/hil.md, \"A fleet\")",
             "wifi": "the Wi-Fi network goes in the record each carrier sends: `alabama provision qr --wifi-ssid NAME` "
                     "(or sound, serial; the passphrase is asked for)"}

#: The names of alabama's own commands (cli.build_parser sets them): one typed under a group is named as it is run.
ROOT_COMMANDS = []


def one_line(prog, message):
    """argparse's MESSAGE for the parser PROG as the line we print (a typo'd command gets the nearest name)."""
    message = " ".join(message.split())
    if message.startswith("argument ") and ": invalid choice: " in message:
        head, _, rest = message.partition(": invalid choice: ")       # "'bord' (choose from 'a', 'b')", any quoting
        quoted = re.match(r"(['\"])(.*?)\1", rest)
        typed = quoted.group(2) if quoted else rest.split(" (", 1)[0]
        names = [n.strip(" '\")") for n in rest.rsplit("(choose from ", 1)[-1].split(",")]
        near = difflib.get_close_matches(typed, names, n=1) or [n for n in SYNONYMS.get(typed.lower(), ())
                                                                 if n in names]
        if head.endswith(("COMMAND", "ACTION", "RUNNER", "CARRIER")):
            if not near and typed.lower() in ELSEWHERE:
                return "%s has no command %r: %s" % (prog, typed, ELSEWHERE[typed.lower()])
            if not near and prog != "alabama" and typed in ROOT_COMMANDS:
                return "%s has no command %r: it is a command of its own, `alabama %s` (`alabama %s --help` says " \
                       "how)" % (prog, typed, typed, typed)
            hint = ("did you mean '%s'? " % near[0]) if near else ""
            return "%s has no command %r: %s`%s --help` lists them" % (prog, typed, hint, prog)
        hint = (" (did you mean '%s'?)" % near[0]) if near and not typed.isdigit() else ""
        return "%s: %s: %r is not one of %s%s" % (prog, head[len("argument "):], typed, ", ".join(names), hint)
    if "pip install" in message or "`" in message:     # it already says what to do
        return "%s: %s" % (prog, message)
    return "%s: %s (`%s --help` lists the options)" % (prog, message, prog)


def _number(kind, text):
    try:
        v = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a %s" % (text, "whole number" if kind is int else "number")) \
            from None
    if kind is float and not math.isfinite(v):
        raise argparse.ArgumentTypeError("%r is not a finite number" % text)
    return v


def positive(kind=float, what="seconds"):
    """A type for a number > 0 (a duration, a timeout, a count)."""
    def check(text):
        v = _number(kind, text)
        if v <= 0:
            raise argparse.ArgumentTypeError("%s: give %s > 0" % (text, what))
        return v
    check.__name__ = "positive %s" % kind.__name__
    return check


def non_negative(kind=float, what="seconds", zero="none"):
    """A type for a number >= 0 where 0 means ZERO (no limit, no pings, a free port)."""
    def check(text):
        v = _number(kind, text)
        if v < 0:
            raise argparse.ArgumentTypeError("%s: give %s >= 0 (0: %s)" % (text, what, zero))
        return v
    check.__name__ = "non-negative %s" % kind.__name__
    return check


def tcp_port(zero_ok=False):
    """A type for a TCP port, 1..65535 (ZERO_OK: 0 asks the system for a free one)."""
    def check(text):
        v = _number(int, text)
        if not (0 if zero_ok else 1) <= v <= 65535:
            raise argparse.ArgumentTypeError("%s is not a TCP port: give 1..65535%s"
                                             % (text, " (0: a free one)" if zero_ok else ""))
        return v
    check.__name__ = "TCP port"
    return check


def between(kind, low, high, what=None):
    """A type for a number in LOW..HIGH (both included); WHAT names the unit in the refusal ("seconds")."""
    def check(text):
        v = _number(kind, text)
        if not low <= v <= high:
            raise argparse.ArgumentTypeError("%s is outside %s..%s%s" % (text, low, high, " " + what if what else ""))
        return v
    check.__name__ = "%s in %s..%s" % (kind.__name__, low, high)
    return check


def quiet_broken_pipe():
    """After the reader of our stdout went away (`alabama ... | head -1`): point stdout at /dev/null so that the
    interpreter's final flush has nowhere to fail, and return the status a shell gives a pipe's writer (128+SIGPIPE)."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):      # a stdout without a descriptor (captured in tests)
        pass
    return 141
