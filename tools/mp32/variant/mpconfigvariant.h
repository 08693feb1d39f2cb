// The 32-bit unix port that stands in for the ESP32-S3 in tests (tools/mp32/build.sh builds it with -m32).
// What it shares with the board: 32-bit machine words, so 31-bit small ints and 32-bit viper ints,
// 4-byte pointers and object headers (heap figures close to the board's), and single-precision floats
// (the esp32 port builds with MICROPY_FLOAT_IMPL_FLOAT). What it does not share: the Xtensa emitter
// (this build emits x86 native code) and the esp32 port's modules (machine.I2S, network, esp32).
#define MICROPY_CONFIG_ROM_LEVEL (MICROPY_CONFIG_ROM_LEVEL_EXTRA_FEATURES)
#define MICROPY_FLOAT_IMPL (MICROPY_FLOAT_IMPL_FLOAT)
#include "variants/mpconfigvariant_common.h"

// Ctrl-C is scheduled into the VM (mp_sched_keyboard_interrupt), as on the esp32 port, not raised from the
// signal handler. The unix default (MICROPY_ASYNC_KBD_INTR = !GIL) longjmps out of whatever C code the
// signal lands in: a Ctrl-C from mpremote/the raw-REPL shim that landed inside qstr_from_strn_helper left
// the qstr mutex (QSTR_ENTER, a pthread mutex with threads on and no GIL) locked, and the next qstr the
// REPL made deadlocked the virtual board for good (seen in a CI run of test_deploy, 2026-12-03: gdb showed
// pthread_mutex_lock under qstr_from_strn_helper). Blocking calls still end on Ctrl-C: they retry on EINTR
// and handle the pending exception (MP_HAL_RETRY_SYSCALL).
#undef MICROPY_ASYNC_KBD_INTR
#define MICROPY_ASYNC_KBD_INTR (0)
