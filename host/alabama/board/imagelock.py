"""Trust on first use for the MicroPython images the repository does not pin: the lock file of recorded digests.

Responsible for: where the image cache and its lock file live (the platform's user cache dir, via platformdirs;
ALABAMA_IMAGE_CACHE overrides), reading and writing the lock (one JSON file, written atomically) and the
one-line refusal when a download differs from what was recorded. Not responsible for: downloading (flash.py)
or the pins the repository carries (images.py: a pin there always wins over the lock).

The lock is ``<cache>/images.lock.json``: ``{"format": 1, "images": {file name: {"sha256", "size", "url",
"recorded"}}}``. A file that cannot be read as that is refused in one line (never silently replaced: it is
what a later download is checked against).
"""
import datetime
import json
import os
import pathlib

from ..errors import AlabamaError

LOCK_NAME = "images.lock.json"
LOCK_FORMAT = 1
#: The lock never grows past this (a few dozen images at most ever land in it): checked before it is parsed.
MAX_LOCK_BYTES = 1 << 20


class LockError(AlabamaError):
    """The image lock cannot be used, or a download differs from it; the message says what to do."""


def cache_dir(env=None):
    """Where downloaded images and the lock live: $ALABAMA_IMAGE_CACHE, else <user cache dir>/alabama/images
    (platformdirs: ~/.cache on Linux, ~/Library/Caches on macOS, %LOCALAPPDATA% on Windows)."""
    env = os.environ if env is None else env
    if env.get("ALABAMA_IMAGE_CACHE"):
        return pathlib.Path(env["ALABAMA_IMAGE_CACHE"])
    import platformdirs
    return pathlib.Path(platformdirs.user_cache_dir("alabama", appauthor=False)) / "images"


def lock_path(cache=None):
    return pathlib.Path(cache or cache_dir()) / LOCK_NAME


def read(cache=None):
    """{file name: entry} recorded so far ({} when there is no lock yet)."""
    path = lock_path(cache)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_LOCK_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise LockError("cannot read the image lock %s (%s): check its permissions" % (path, e.strerror or e)) \
            from None
    try:
        if len(data) > MAX_LOCK_BYTES:
            raise ValueError("too large")
        doc = json.loads(data)
        if doc.get("format") != LOCK_FORMAT or not isinstance(doc.get("images"), dict):
            raise ValueError("not format %d" % LOCK_FORMAT)
        for name, e in doc["images"].items():
            if not (isinstance(e, dict) and isinstance(e.get("sha256"), str) and len(e["sha256"]) == 64):
                raise ValueError(name)
    except (ValueError, AttributeError):
        raise LockError("the image lock %s is damaged: delete it (the next flash records each image anew, check "
                        "the sha256 it prints against the download page) or restore it" % path) from None
    return doc["images"]


def entry(file, cache=None):
    """The recorded entry for image `file`, or None."""
    return read(cache).get(file)


def record(file, sha256, size, url, cache=None, now=None):
    """Record (or replace) `file`'s digest; returns the lock's path."""
    images = read(cache)
    when = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    images[file] = {"sha256": sha256, "size": size, "url": url, "recorded": when}
    path = lock_path(cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"format": LOCK_FORMAT, "images": images}, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def differs(file, got, recorded, cache=None):
    """The refusal for a download of `file` whose sha256 `got` is not the one recorded on first use."""
    return LockError("refusing %s: its sha256 is %s but %s recorded %s on first use (%s): the image changed or "
                     "was substituted, nothing was flashed; if you trust the new one (check it against "
                     "micropython.org/download/ESP32_GENERIC_S3/), run again with --image-sha256 %s"
                     % (file, got, lock_path(cache), recorded["sha256"], recorded.get("recorded", "?"), got))
