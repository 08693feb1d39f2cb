# Test fixture for test_hal_esp32: a "viper" module whose import fails with MemoryError, as a native
# module does on a board when its machine code finds no room (satellite.audio.load_fast falls back).
raise MemoryError("simulated: no room for this module's native code")
