"""Release images on GitHub: what a release carries per board, and fetching one for `alabama flash --release`.

Responsible for: the one naming of a release's per-board assets (`alabama-<board>-<tag>-<file>`, used by the
release workflow's staging step, `python -m alabama.board.release stage`, and by the download), finding a tag's
release through GitHub's REST API, downloading a board's firmware.bin with its .sha256 into
build/releases/<tag>/<board>/, and refusing it unless its sha256 matches. Every failure is one line saying what to do.
Not responsible for: building the image (image.py, `make image`), what the OTA manifest says (the image OTA), or
flashing (flash.py writes the file this returns exactly as it writes `--firmware PATH`).

GitHub's REST API (docs.github.com/en/rest/releases/releases, "Get a release by tag name"):
`GET /repos/{owner}/{repo}/releases/tags/{tag}` answers 404 for an unknown tag, else the release with its
`assets`, each with `name`, `size`, `browser_download_url` and, since 2025-06 (github.blog changelog
2025-06-03, "Releases now expose digests for release assets"), `digest` ("sha256:<hex>"). Unauthenticated callers
get 60 API requests an hour (403/429 past that); the asset downloads themselves are not API requests.
"""
import hashlib
import json
import os
import pathlib
import re
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request

from .. import BUILD, GITHUB_REPOSITORY
from ..errors import AlabamaError, UsageError
from .appimage import RELEASE_FILES
from .fwset import shown

#: What `make image BOARD=X` leaves in build/image/X/ for a release (appimage owns the names), in upload order:
#: the image esptool writes at 0x0, its sha256 (`sha256sum` format: hex digest first) and the image OTA manifest.
IMAGE_FILES = RELEASE_FILES
FIRMWARE, DIGEST, OTA_MANIFEST = IMAGE_FILES
#: The API root of the project's repository; ALABAMA_RELEASES_URL overrides it (a mirror, the tests' server).
API = "https://api.github.com/repos/" + GITHUB_REPOSITORY
PAGE = "https://github.com/%s/releases" % GITHUB_REPOSITORY
CACHE = BUILD / "releases"
#: Limits on what a server sends, checked before reading it: the release JSON (GitHub caps a release body at
#: 125,000 characters; the asset list of every board stays far below this), a sha256 line.
MAX_RELEASE_JSON = 1 << 20
MAX_DIGEST_FILE = 1024
#: A tag as a path component and a URL segment (git allows more; our tags are vX.Y.Z).
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_BLOCK = 1 << 16


class ReleaseError(AlabamaError):
    """A release image cannot be had; the message is one line saying what to do."""


def asset_name(board_id, tag, file):
    """The name a per-board file carries on the release: alabama-<board>-<tag>-<file> (boards never collide)."""
    return "alabama-%s-%s-%s" % (board_id, tag, file)


def check_tag(tag):
    if not isinstance(tag, str) or not TAG_RE.match(tag):
        raise UsageError("--release %r is not a tag name: give one like v0.2.0 (the releases: %s)" % (tag, PAGE))
    return tag


def base_url(env=None):
    env = os.environ if env is None else env
    return (env.get("ALABAMA_RELEASES_URL") or API).rstrip("/")


def parse_digest(text, what):
    """The hex digest from a `sha256sum` line ('<hex>  firmware.bin'); ReleaseError if it is not one."""
    token = text.split(None, 1)[0].lower() if text.split() else ""
    if not _HEX64.match(token):
        raise ReleaseError("%s is not a sha256 line (64 hex digits first): the release is damaged; report it, "
                           "or pick another release" % what)
    return token


# --- staging (the release workflow) ---------------------------------------------------------------------

def stage(board_id, tag, image_dir, out_dir):
    """Copy build/image/<board>/{IMAGE_FILES} to out_dir under their asset names, after checking that the
    image matches its .sha256. Returns the staged paths."""
    check_tag(tag)
    image_dir, out_dir = pathlib.Path(image_dir), pathlib.Path(out_dir)
    missing = [f for f in IMAGE_FILES if not (image_dir / f).is_file()]
    if missing:
        raise ReleaseError("%s has no %s: run `make image BOARD=%s` first" % (shown(image_dir), ", ".join(missing),
                                                                               board_id))
    want = parse_digest((image_dir / DIGEST).read_text(errors="replace")[:MAX_DIGEST_FILE], shown(image_dir / DIGEST))
    got = _sha256_file(image_dir / FIRMWARE)
    if got != want:
        raise ReleaseError("%s's sha256 %s... differs from %s (%s...): run `make image BOARD=%s` again"
                           % (shown(image_dir / FIRMWARE), got[:16], DIGEST, want[:16], board_id))
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = []
    for f in IMAGE_FILES:
        dest = out_dir / asset_name(board_id, tag, f)
        shutil.copyfile(image_dir / f, dest)
        staged.append(dest)
    return staged


# --- fetching (`alabama flash --release`) ---------------------------------------------------------------

def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


def _open(url, opener, accept):
    if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
        raise ReleaseError("refusing %s: a release is fetched over http(s) only" % url)
    req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "alabama-flash",
                                               "X-GitHub-Api-Version": "2022-11-28"})
    return (opener or urllib.request.urlopen)(req, timeout=60)


def _length(resp):
    try:
        return int(resp.headers.get("Content-Length"))
    except (TypeError, ValueError, AttributeError):
        return None


def _unreachable(url, reason, fallback):
    return ReleaseError("could not reach %s (%s): check the network connection, %s" % (url, reason, fallback))


def _http_error(url, e, tag, fallback, asset=None):
    if e.code == 404 and asset:
        return ReleaseError("release %s lists %s but %s answered 404: run again later, %s" % (tag, asset, url, fallback))
    if e.code == 404:
        return ReleaseError("no release %s at %s: check the tag (the releases are listed at %s)" % (tag, url, PAGE))
    if e.code in (403, 429):
        return ReleaseError("%s refused the request (HTTP %d, most likely GitHub's limit of 60 unauthenticated API "
                            "requests an hour): wait and run again, %s" % (url, e.code, fallback))
    return ReleaseError("%s answered HTTP %d: run again later, %s" % (url, e.code, fallback))


def _read_small(url, opener, limit, accept, tag, fallback, asset=None):
    try:
        with _open(url, opener, accept) as r:
            n = _length(r)
            if n is not None and n > limit:
                raise ReleaseError("%s sent %d bytes, more than the %d expected: refusing it" % (url, n, limit))
            data = r.read(limit + 1)
    except urllib.error.HTTPError as e:
        raise _http_error(url, e, tag, fallback, asset) from None
    except (urllib.error.URLError, OSError) as e:
        raise _unreachable(url, getattr(e, "reason", None) or e, fallback) from None
    if len(data) > limit:
        raise ReleaseError("%s sent more than the %d bytes expected: refusing it" % (url, limit))
    return data


def find_release(tag, base=None, opener=None, fallback=""):
    """The release JSON for `tag` (GitHub's "Get a release by tag name")."""
    url = "%s/releases/tags/%s" % (base or base_url(), urllib.parse.quote(tag, safe=""))
    data = _read_small(url, opener, MAX_RELEASE_JSON, "application/vnd.github+json", tag, fallback)
    try:
        release = json.loads(data)
        assets = {a["name"]: a for a in release["assets"]}
    except (ValueError, KeyError, TypeError):
        raise ReleaseError("%s did not answer with a GitHub release (JSON with assets): check ALABAMA_RELEASES_URL, "
                           "or run again later" % url) from None
    return assets


def _download(url, dest, limit, want, api_digest, tag, fallback, opener=None):
    """Stream `url` into dest (through dest.part), hashing as it goes; the file appears only when its size is
    within `limit` and its sha256 is `want` (and GitHub's own digest, when the API gave one)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    h, n = hashlib.sha256(), 0
    try:
        with _open(url, opener, "application/octet-stream") as r, open(part, "wb") as f:
            size = _length(r)
            if size is not None and size > limit:
                raise ReleaseError("%s is %d bytes, larger than the board's flash (%d): refusing it"
                                   % (dest.name, size, limit))
            for block in iter(lambda: r.read(_BLOCK), b""):
                n += len(block)
                if n > limit:
                    raise ReleaseError("%s is larger than the board's flash (%d bytes): refusing it" % (dest.name, limit))
                h.update(block)
                f.write(block)
    except urllib.error.HTTPError as e:
        part.unlink(missing_ok=True)
        raise _http_error(url, e, tag, fallback, dest.name) from None
    except (urllib.error.URLError, OSError) as e:
        part.unlink(missing_ok=True)
        raise _unreachable(url, getattr(e, "reason", None) or getattr(e, "strerror", None) or e, fallback) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    got = h.hexdigest()
    for expect, whose in ((want, "the release's %s" % DIGEST), (api_digest, "GitHub's digest of the asset")):
        if expect is not None and got != expect:
            part.unlink(missing_ok=True)
            raise ReleaseError("refusing %s: sha256 %s... does not match %s (%s...): a corrupt or substituted "
                               "download, nothing was flashed; run again to download it anew"
                               % (dest.name, got[:16], whose, expect[:16]))
    part.replace(dest)


def _api_digest(asset):
    d = asset.get("digest") if isinstance(asset, dict) else None
    if isinstance(d, str) and d.startswith("sha256:") and _HEX64.match(d[7:].lower()):
        return d[7:].lower()
    return None


def cached(board, tag, cache=None):
    """(firmware path, digest path) in the cache for this board and tag."""
    d = pathlib.Path(cache or CACHE) / tag / board.id
    return d / asset_name(board.id, tag, FIRMWARE), d / asset_name(board.id, tag, DIGEST)


def fetch(board, tag, cache=None, opener=None, out=print, download=True, env=None):
    """The firmware.bin of release `tag` for `board`, checked against the release's sha256 and cached under
    build/releases/<tag>/<board>/ (a checked cached copy is used without the network). download=False (a dry
    run): nothing is fetched; the cache path is returned."""
    check_tag(tag)
    if board.is_virtual or not board.image:
        raise UsageError("board %s is the virtual board: releases carry no image for it (it runs on the unix "
                         "port)" % board.id)
    fw, dg = cached(board, tag, cache)
    name = fw.name
    fallback = ("or download %s and %s from %s/tag/%s by hand and pass --firmware PATH"
                % (name, dg.name, PAGE, tag))
    if fw.is_file() and dg.is_file():
        try:
            want = parse_digest(dg.read_text(errors="replace")[:MAX_DIGEST_FILE], shown(dg))
        except ReleaseError:
            want = None
        if want and _sha256_file(fw) == want:
            out("release %s for %s: using %s (sha256 %s...)" % (tag, board.id, shown(fw), want[:16]))
            return fw
        fw.unlink()                    # a damaged copy: fetched anew below
    base = base_url(env)
    if not download:
        out("would download %s from release %s (%s), check its sha256 and keep it in %s" % (name, tag, base,
                                                                                            shown(fw.parent)))
        return fw
    assets = find_release(tag, base, opener, fallback)
    missing = [n for n in (name, dg.name) if n not in assets]
    if missing:
        suffix = "-%s-%s" % (tag, FIRMWARE)
        have = sorted(n[len("alabama-"):-len(suffix)] for n in assets
                      if n.startswith("alabama-") and n.endswith(suffix))
        raise ReleaseError("release %s has no %s for board %s (%s): pick the --board it was built for, or a "
                           "release that has this board" % (tag, missing[0], board.id,
                                                            "images for: " + ", ".join(have) if have
                                                            else "it has no board images"))
    for n in (name, dg.name):
        if not isinstance(assets[n].get("browser_download_url"), str):
            raise ReleaseError("%s's asset %s has no download URL: report it, or pick another release" % (tag, n))
    out("downloading %s (release %s)" % (assets[name]["browser_download_url"], tag))
    text = _read_small(assets[dg.name]["browser_download_url"], opener, MAX_DIGEST_FILE,
                       "application/octet-stream", tag, fallback, dg.name)
    want = parse_digest(text.decode("ascii", "replace"), "release %s's %s" % (tag, dg.name))
    limit = int(board.data.get("flash_mb") or 16) << 20
    _download(assets[name]["browser_download_url"], fw, limit, want, _api_digest(assets[name]), tag, fallback,
              opener)
    dg.write_text(text.decode("ascii", "replace"))
    out("release %s for %s: %s, sha256 %s... checked" % (tag, board.id, shown(fw), want[:16]))
    return fw


#: The image OTA manifest's download limit (the board's own limit: satellite.ota MAX_MANIFEST).
MAX_OTA_MANIFEST = 16384


def fetch_ota(board, tag, cache=None, opener=None, out=print, env=None):
    """The image OTA release `alabama ota --release TAG` serves: a directory holding firmware.bin,
    firmware.bin.sha256 and ota-image.json under the names `make image` gives them (appimage.RELEASE_FILES),
    made from the release's assets — firmware.bin checked against its sha256 as for flashing (fetch), the
    manifest fetched beside it (its sha256 becomes the pin the core sends; the board checks the app against it)."""
    fw = fetch(board, tag, cache, opener, out, env=env)
    d = fw.parent / "ota"
    name = asset_name(board.id, tag, OTA_MANIFEST)
    man = fw.parent / name
    if not man.is_file():
        fallback = "or download %s from %s/tag/%s by hand and pass --image DIR" % (name, PAGE, tag)
        assets = find_release(tag, base_url(env), opener, fallback)
        url = (assets.get(name) or {}).get("browser_download_url")
        if not isinstance(url, str):
            raise ReleaseError("release %s has no %s: it predates image OTA; flash it over USB (alabama flash "
                               "--release %s) or pick a newer release" % (tag, name, tag))
        data = _read_small(url, opener, MAX_OTA_MANIFEST, "application/octet-stream", tag, fallback, name)
        try:
            json.loads(data)
        except ValueError:
            raise ReleaseError("release %s's %s is not JSON: report it, or pick another release" % (tag, name)) \
                from None
        man.write_bytes(data)
    d.mkdir(exist_ok=True)
    shutil.copyfile(fw, d / FIRMWARE)
    (d / DIGEST).write_text("%s  %s\n" % (_sha256_file(fw), FIRMWARE))
    shutil.copyfile(man, d / OTA_MANIFEST)
    return d


# --- command line (the workflow) ------------------------------------------------------------------------

def main(argv=None):
    """`python -m alabama.board.release stage --board B --tag T --image-dir build/image/B --out DIR`: the
    release workflow's staging step (names the image files `make image` left as the release assets)."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m alabama.board.release")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage", help="copy build/image/BOARD's files to DIR under their release asset names")
    s.add_argument("--board", required=True)
    s.add_argument("--tag", required=True)
    s.add_argument("--out", required=True, metavar="DIR")
    s.add_argument("--image-dir", required=True, metavar="DIR", help="what `make image` left: build/image/BOARD")
    args = p.parse_args(argv)
    try:
        for path in stage(args.board, args.tag, args.image_dir, args.out):
            print(path)
    except AlabamaError as e:
        print("release: error: %s" % e, file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
