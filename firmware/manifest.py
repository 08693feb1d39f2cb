# What the Alabama image freezes: the one list, used by `alabama image` / `make image` (a custom
# ESP32_GENERIC_S3 MicroPython v1.27.0 image) and by tools/mp32/build_frozen.sh (the 32-bit unix
# interpreter the tests and `make devkit-heap` run), so both freeze exactly these files.
#
# A MicroPython manifest (docs/reference/manifest.rst, tools/manifestfile.py at v1.27.0): run by the
# build, never by the firmware. Relative paths resolve against this file's directory (manifestfile.py
# include() chdirs into it). Frozen, the bytecode, qstrs and constants stay in flash: ~74 KB of heap at
# rest on 32 bits instead of ~189 KB from .mpy files (docs/memory.md).
#
# Not frozen: main.py and boot.py (the board runs them from its filesystem, so `alabama deploy` still
# installs them), board.json and /data (configuration and keys).

# The firmware package, every .py under satellite/ as satellite/...
package("satellite")

# Top-level modules beside the package (deploy puts them in /lib, never inside lib/satellite: docs/ota.md)
module("otaboot.py")
