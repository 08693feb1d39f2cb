// The 32-bit unix port that stands in for the ESP32-S3 in tests (tools/mp32/build.sh builds it with -m32).
// What it shares with the board: 32-bit machine words, so 31-bit small ints and 32-bit viper ints,
// 4-byte pointers and object headers (heap figures close to the board's), and single-precision floats
// (the esp32 port builds with MICROPY_FLOAT_IMPL_FLOAT). What it does not share: the Xtensa emitter
// (this build emits x86 native code) and the esp32 port's modules (machine.I2S, network, esp32).
#define MICROPY_CONFIG_ROM_LEVEL (MICROPY_CONFIG_ROM_LEVEL_EXTRA_FEATURES)
#define MICROPY_FLOAT_IMPL (MICROPY_FLOAT_IMPL_FLOAT)
#include "variants/mpconfigvariant_common.h"
