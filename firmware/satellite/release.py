# The release signature of an update's manifest: authenticity beyond the channel (issue 29). A board whose
# provisioning record pins a release key (ProvisioningRecord.release_key, an Ed25519 public key) takes a
# manifest only with a valid detached signature by that key, fetched from `<manifest url>.sig` (64 raw bytes)
# and checked before anything is written; without a pinned key it trusts the channel as before (the pinned
# core sent the manifest's sha256). It only decides; satellite.ota fetches and writes. docs/ota.md.
#
# What is signed: CONTEXT + sha256(manifest) (47 bytes), not the manifest itself: SHA-512 is hand-rolled in
# Python here (satellite.noise.sha512, ~175 KB of big-int garbage per 128-byte block on the 32-bit port), so
# a 6 KB manifest would cost ~50 blocks; the manifest's sha256 comes from hashlib (the hardware on the ESP32)
# and binds it as strongly as every file's sha256 already binds the files. CONTEXT keeps a release key's
# signature over anything else from passing for a manifest signature. The host side: alabama.board.signing.
from micropython import const

CONTEXT = b"alabama ota v1\n"   # 15 B: R + A + CONTEXT + digest stay one SHA-512 block; alabama.board.signing mirrors it
SIG_SUFFIX = ".sig"
SIG_LEN = const(64)                      # an Ed25519 signature; the download limit of the .sig file


def message(digest):
    """The bytes a release key signs for a manifest whose sha256 is `digest` (32 bytes)."""
    return CONTEXT + bytes(digest)


async def check(upd, url, manifest):
    """Called by satellite.ota once the manifest bytes matched their pin, before any write. upd: the Updater
    (its connect, buffer and release_key: b"" or None = no pinned key, channel trust). Returns True when a
    signature was verified, False without a pinned key; raises ota.OtaError otherwise."""
    key = getattr(upd, "release_key", None)
    if not key:
        return False
    import hashlib
    from satellite import otahttp as ota
    sig = bytearray()

    def into(mv, n):
        sig.extend(mv)

    try:
        await ota.http_get(upd.connect, url + SIG_SUFFIX, SIG_LEN, into, upd.buf)
    except ota.OtaError as e:
        if e.reason == "HTTP_404":
            raise ota.OtaError(ota.INVALID_REQUEST, "UNSIGNED", "this board pins a release key and %s%s is not "
                               "there: sign the release (alabama ota --sign-key KEY)" % (url[-40:], SIG_SUFFIX))
        if e.reason == "TOO_LARGE":
            raise ota.OtaError(ota.INVALID_REQUEST, "BAD_SIGNATURE", "the manifest signature is not %d bytes" % SIG_LEN)
        raise
    if len(sig) != SIG_LEN:
        raise ota.OtaError(ota.INVALID_REQUEST, "BAD_SIGNATURE", "the manifest signature is %d bytes, not %d"
                           % (len(sig), SIG_LEN))
    from satellite.noise import ed25519
    if not ed25519.verify(key, message(hashlib.sha256(manifest).digest()), sig):
        raise ota.OtaError(ota.INVALID_REQUEST, "BAD_SIGNATURE", "the manifest signature does not verify with the "
                           "pinned release key: not this release's key, or the manifest was altered")
    upd.log("ota: manifest signature verified with the pinned release key %s..." % ota._hex(key[:4]))
    return True
