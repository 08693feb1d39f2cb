# Frozen into the 32-bit test interpreter: asyncio, which the firmware runtime needs (the esp32 port freezes it too).
include("$(MPY_DIR)/extmod/asyncio")
