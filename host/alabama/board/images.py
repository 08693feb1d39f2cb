"""The ONE place pinning the official MicroPython image per variant: version, file, URL, sha256.

A board file names a variant (`image`); `alabama flash` resolves it here, never anywhere else.
Sources: MicroPython ports/esp32/boards/ESP32_GENERIC_S3/board.md (generic image for no/quad PSRAM,
"spiram-oct" variant for octal PSRAM) and board.json (`deploy_options.flash_offset: "0"`: the S3 image
is a merged bootloader+partition table+app written at offset 0x0).
"""
from dataclasses import dataclass

#: The release both variants are pinned to. v1.27.0 is the newest release whose download file names
#: are confirmed in public use (built 2025-12-09); bump version, dates and hashes together.
MICROPYTHON_VERSION = "1.27.0"
_BASE_URL = "https://micropython.org/resources/firmware/"

#: Where esptool writes the image (0x0 for ESP32-S3 MicroPython images, board.json flash_offset "0").
FLASH_OFFSET = 0x0


@dataclass(frozen=True)
class Image:
    variant: str
    version: str
    file: str
    url: str
    #: Lower-case hex sha256 of the file, or None when not pinned yet (then `alabama flash` trusts the first
    #: download and records it: board/imagelock.py).
    sha256: str | None
    size: int | None
    #: Where the pin came from, so the next person can re-check it.
    provenance: str


def _image(variant, file, sha256, size, provenance):
    return Image(variant, MICROPYTHON_VERSION, file, _BASE_URL + file, sha256, size, provenance)


IMAGES = {
    "ESP32_GENERIC_S3": _image(
        "ESP32_GENERIC_S3",
        "ESP32_GENERIC_S3-20251209-v1.27.0.bin",
        "f533115edca660863b1308445d5c08e3fa108b34c39229a53c2f984a8186a9cd",
        1753904,
        "Git LFS pointer of a copy of the official download (github.com/wang-edward/minisynth "
        "firmware/ESP32_GENERIC_S3-20251209-v1.27.0.bin); re-check with sha256sum after downloading "
        "from micropython.org/download/ESP32_GENERIC_S3/",
    ),
    "ESP32_GENERIC_S3-SPIRAM_OCT": _image(
        "ESP32_GENERIC_S3-SPIRAM_OCT",
        "ESP32_GENERIC_S3-SPIRAM_OCT-20251209-v1.27.0.bin",
        None,
        None,
        "file name confirmed in public use; no independent sha256 was available offline: download it "
        "once from micropython.org/download/ESP32_GENERIC_S3/, check it, and record sha256 and size here",
    ),
}

VARIANTS = tuple(IMAGES)


def image_for(variant):
    """The pinned Image for a board file's `image` value (KeyError if the variant is unknown)."""
    return IMAGES[variant]


def by_file_name(name):
    """The pinned Image whose file name is `name`, or None."""
    for img in IMAGES.values():
        if img.file == name:
            return img
    return None
