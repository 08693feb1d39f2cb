# The _aead_c (aead.c), _wake_c (wake.c) and _wake_fe_c (wake_fe.c) user C modules for MicroPython's make-based ports (docs/develop/cmodules.rst of
# the pinned release): USER_C_MODULES names the directory above this one, so
#   make -C ports/unix USER_C_MODULES=/path/to/firmware      (tools/mp32/build.sh, build_frozen.sh)
# The esp32 port builds with CMake: micropython.cmake beside this file (alabama image).
AEAD_MOD_DIR := $(USERMOD_DIR)

SRC_USERMOD_C += $(AEAD_MOD_DIR)/aead.c
SRC_USERMOD_C += $(AEAD_MOD_DIR)/wake.c
SRC_USERMOD_C += $(AEAD_MOD_DIR)/wake_fe.c
CFLAGS_USERMOD += -I$(AEAD_MOD_DIR)
