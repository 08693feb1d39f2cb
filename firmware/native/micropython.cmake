# The _aead_c (aead.c), _wake_c (wake.c) and _wake_fe_c (wake_fe.c) user C modules for MicroPython's CMake-based ports, the esp32 port among them
# (docs/develop/cmodules.rst of the pinned release: an INTERFACE library linked to `usermod`).
# `alabama image` / `make image` passes USER_C_MODULES=<this file> to the esp32 build.
# The make-based ports (the unix builds of tools/mp32) use micropython.mk beside it.
add_library(usermod_aead_c INTERFACE)

target_sources(usermod_aead_c INTERFACE
    ${CMAKE_CURRENT_LIST_DIR}/aead.c
    ${CMAKE_CURRENT_LIST_DIR}/wake.c
    ${CMAKE_CURRENT_LIST_DIR}/wake_fe.c
)

target_include_directories(usermod_aead_c INTERFACE
    ${CMAKE_CURRENT_LIST_DIR}
)

target_link_libraries(usermod INTERFACE usermod_aead_c)
