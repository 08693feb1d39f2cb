#!/usr/bin/env bash
# A measuring interpreter, not a product: the 32-bit unix port of tools/mp32/build.sh (same pinned Debian
# source, same variant) with the firmware FROZEN into it by the same manifest the board image uses
# (firmware/manifest.py: package satellite and otaboot.py; `alabama image` / `make image`). With it, the frozen leg of
# tests/host/test_memory_fit.py measures what the firmware costs in the GC heap when its bytecode, constants
# and qstrs stay in flash (docs/memory.md, "Frozen modules").
#
#   tools/mp32/build_frozen.sh [FIRMWARE_DIR]    # default: firmware/ as it is on disk
#   -> build/mp32-frozen/micropython
#   WAKE_MODELS="okay_nabu hey_jarvis alexa hey_mycroft" tools/mp32/build_frozen.sh
#   -> build/mp32-frozen-wake/micropython: the same with those wake models frozen in as `alabama image` freezes a
#      board file's wake.models (alabama.wake.frozen: compiled now from pymicro-wakeword or your .tflite/.aww,
#      module alabama_wake, read in place by satellite.wake.model.load_frozen); tests/host/test_wake_frozen.py
#
# Needs the source tarball build.sh fetched (run `make mp32` first). Viper modules are frozen as x86 native
# code (MPY_CROSS_FLAGS=-march=x86), so they leave the heap like on the board.
set -euo pipefail
cd "$(dirname "$0")/../.."

ORIG=build/mp32/micropython_1.26.1+ds.orig.tar.xz
SRC_DIR=micropython-1.26.1
WAKE_MODELS="${WAKE_MODELS:-}"
OUT=build/mp32-frozen
[ -z "$WAKE_MODELS" ] || OUT=build/mp32-frozen-wake
die() { echo "mp32-frozen: error: $*" >&2; exit 1; }
[ -f "$ORIG" ] || die "no $ORIG: run 'make mp32' (tools/mp32/build.sh) first"

FW="${1:-firmware}"
# what the frozen leg of tests/host/test_memory_fit.py compares with the firmware it would measure
stamp="$(cd "$FW" && find . -name '*.py' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"
# STAMP is the firmware's digest alone (test_memory_fit compares it); BUILD_STAMP also covers how the
# interpreter is built (the variant, this script, the user C modules of firmware/native: _aead_c, _wake_c, _wake_fe_c, built
# in as in the board image), so a change there rebuilds it too.
USER_C="$PWD/firmware"
build_stamp="$( (cat tools/mp32/variant/* tools/mp32/build_frozen.sh "$USER_C"/native/*; echo "wake: $WAKE_MODELS") | sha256sum | cut -c1-16)"
if [ -x "$OUT/micropython" ] && [ "$(cat "$OUT/STAMP" 2>/dev/null)" = "$stamp" ] \
   && [ "$(cat "$OUT/BUILD_STAMP" 2>/dev/null)" = "$build_stamp" ]; then
  exit 0                                       # already built from this firmware
fi
rm -rf "$OUT" && mkdir -p "$OUT/variant" "$OUT/fw"
cp -r "$FW"/. "$OUT/fw/"
cp tools/mp32/variant/* "$OUT/variant/"
[ -f "$OUT/fw/manifest.py" ] || die "$FW has no manifest.py (firmware/manifest.py: what an image freezes)"
# The board image's list (firmware/manifest.py, as `alabama image` freezes it), then the digest module
# `alabama deploy` reads on a board (alabama.board.image.write_stamp): both builds freeze the same files.
PY=python3; [ -x .venv/bin/python ] && PY=.venv/bin/python
PYTHONPATH="$PWD/host" "$PY" -m alabama.board.image stamp "$OUT/fw" "$OUT/stamp" >/dev/null \
  || die "could not write the firmware digest module (python -m alabama.board.image)"
{ printf '\n# build_frozen.sh: what the board image freezes (firmware/manifest.py), and its digest\n'
  printf 'include("%s")\n' "$PWD/$OUT/fw/manifest.py"
  printf 'module("alabama_image.py", base_path="%s")\n' "$PWD/$OUT/stamp"; } >> "$OUT/variant/manifest.py"
if [ -n "$WAKE_MODELS" ]; then
  # shellcheck disable=SC2086  # WAKE_MODELS is a list of names / paths
  PYTHONPATH="$PWD/host" "$PY" -m alabama.wake.frozen "$OUT/wake" "$OUT/fw" $WAKE_MODELS || die "no wake models frozen (above)"
  printf 'module("alabama_wake.py", base_path="%s")\n' "$PWD/$OUT/wake" >> "$OUT/variant/manifest.py"
fi
tar -C "$OUT" -xJf "$ORIG"
mkdir -p "$OUT/nolib"
echo "build_frozen.sh freezes no micropython-lib package" > "$OUT/nolib/README.md"
export GIT_CEILING_DIRECTORIES="$PWD/$OUT"
J=$(nproc 2>/dev/null || echo 2)
echo "mp32-frozen: building (about a minute)" >&2
make -s -C "$OUT/$SRC_DIR/mpy-cross" -j"$J" >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log" >&2; die "mpy-cross did not build"; }
make -C "$OUT/$SRC_DIR/ports/unix" -j"$J" VARIANT_DIR="$PWD/$OUT/variant" BUILD="$PWD/$OUT/obj" PROG=micropython \
     MPY_LIB_DIR="$PWD/$OUT/nolib" MICROPY_FORCE_32BIT=1 MICROPY_PY_FFI=0 MICROPY_PY_BTREE=0 \
     MICROPY_SSL_AXTLS=0 MICROPY_SSL_MBEDTLS=0 MICROPY_PY_SSL=0 STRIP=true MPY_CROSS_FLAGS=-march=x86 \
     USER_C_MODULES="$USER_C" \
     CFLAGS_EXTRA="-DMICROPY_FLOAT_USE_NATIVE_FLT16=0" >>"$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log" >&2; die "the unix port did not build (log: $OUT/build.log)"; }
cp "$OUT/obj/micropython" "$OUT/micropython"
rm -rf "$OUT/$SRC_DIR" "$OUT/obj"
"$OUT/micropython" -c "import sys, _aead_c, _wake_c, _wake_fe_c, satellite.runtime; assert sys.maxsize == 2**31 - 1" \
  || die "the build does not import the frozen firmware"
[ -z "$WAKE_MODELS" ] || "$OUT/micropython" -c "from satellite import wake; assert wake.frozen(), 'no alabama_wake'" \
  || die "the build does not carry the frozen wake models"
echo "$stamp" > "$OUT/STAMP"
echo "$build_stamp" > "$OUT/BUILD_STAMP"
echo "mp32-frozen: built $OUT/micropython (32-bit, satellite frozen${WAKE_MODELS:+, wake models $WAKE_MODELS})" >&2
