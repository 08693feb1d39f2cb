"""A command that needs a missing optional dependency says in one line which extra of alabama-satellite to install
(pyproject.toml: [speech], [hil], [dev]); no traceback, a non-zero exit."""
import importlib.util
import pathlib
import sys
import tomllib

import pytest

import alabama
from alabama import cli, extras


@pytest.fixture
def missing(monkeypatch):
    gone = set()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in gone else real(name, *a))
    return gone


def test_codegen_without_grpcio_tools_names_the_dev_extra(missing, capsys):
    missing.add("grpc_tools")
    rc = cli.main(["codegen", "--check"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err == [
        "alabama: error: alabama codegen (protoc) needs the optional dependency grpc_tools: %s -m pip install -e "
        "'%s[dev]'" % (sys.executable, alabama.REPO)]


def test_the_install_line_is_one_command_for_this_interpreter_whichever_way_alabama_is_installed(monkeypatch):
    """Not two alternatives to choose from, and not a bare `pip` (another Python's, outside the venv or pipx)."""
    monkeypatch.setattr(alabama, "CHECKOUT", False)
    assert extras.hint("hil") == "%s -m pip install 'alabama-satellite[hil]'" % sys.executable
    monkeypatch.setattr(alabama, "CHECKOUT", True)
    monkeypatch.setattr(alabama, "REPO", pathlib.Path("/home/me/my checkout"))
    assert extras.hint("dev") == "%s -m pip install -e '/home/me/my checkout[dev]'" % sys.executable


@pytest.mark.parametrize("gone, argv, says", [
    ({"pytest", "pytest_timeout"}, ["--board", "sim", "--list"], "alabama hil needs pytest and pytest-timeout, "
                                                                  "not installed: "),
    ({"pytest_timeout"}, ["--board", "sim"], "alabama hil needs pytest-timeout, not installed: "),
    ({"xdist"}, ["--board", "sim", "--board", "sim"], "alabama hil with several boards (a pytest-xdist worker each) "
                                                     "needs pytest-xdist, not installed: "),
])
def test_hil_without_pytest_says_exactly_what_to_install_in_one_line(missing, capsys, gone, argv, says):
    missing.update(gone)
    rc = cli.main(["hil"] + argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and err == ["alabama: error: " + says + extras.hint("hil")], err


def test_a_wyoming_engine_without_wyoming_names_the_speech_extra(missing, capsys):
    missing.add("wyoming")
    with pytest.raises(SystemExit) as e:          # an argparse type error: usage line + one error line, exit 2
        cli.main(["core", "serve", "--stt", "wyoming://127.0.0.1:10300"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("a wyoming:// engine needs the wyoming package: pip install 'alabama-satellite[speech]'")
    assert "Traceback" not in "\n".join(err)


def test_every_extra_named_is_one_pyproject_has():
    py = pathlib.Path(alabama.__file__).resolve().parent.parent.parent / "pyproject.toml"
    if not py.is_file():
        pytest.skip("runs in a checkout")
    declared = tomllib.loads(py.read_text())["project"]["optional-dependencies"]
    for module, extra in extras.EXTRAS.items():
        assert extra in declared, (module, extra)
    assert extras.have("json") and not extras.have("no_such_module_here")
