"""Write the README's demo transcript from a real `alabama demo` run.

Responsible for: running `alabama demo` (the venv's, as `make demo` does), and replacing the block between
the README's ``demo-transcript`` markers with what it printed (the temporary work directory shortened).
Not for: judging the run (tests/host/test_readme_demo.py compares a fresh run with the block and fails when
they drift: rerun this then). Run it on a machine with espeak-ng, so the block shows the speech brain:

    .venv/bin/python tools/readme_demo.py
"""
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN = "<!-- demo-transcript:begin"
END = "<!-- demo-transcript:end -->"
#: The demo's temporary work directory, as printed and as the README shows it.
WORKDIR = re.compile(r"/\S*?alabama-demo-[^/\s]+")
SHOWN_WORKDIR = "/tmp/alabama-demo-…"


def run_demo():
    exe = pathlib.Path(sys.executable).with_name("alabama")
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([str(exe), "demo", "--out", str(pathlib.Path(tmp) / "reply.wav")],
                           capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit("alabama demo failed (exit %d):\n%s%s" % (p.returncode, p.stdout, p.stderr))
    return p.stdout


def shown(stdout):
    """The transcript as the README shows it: the work directory shortened, the reply path as `make demo`'s."""
    out = WORKDIR.sub(SHOWN_WORKDIR, stdout.rstrip("\n"))
    return re.sub(r"-> \S*reply\.wav", "-> build/demo-reply.wav", out)


def replace_block(readme, transcript):
    i = readme.index(BEGIN)
    j = readme.index("\n", i) + 1
    k = readme.index(END, j)
    return readme[:j] + "```\n" + transcript + "\n```\n" + readme[k:]


def main():
    text = README.read_text()
    README.write_text(replace_block(text, shown(run_demo())))
    print("README.md: demo transcript rewritten from a real run")


if __name__ == "__main__":
    main()
