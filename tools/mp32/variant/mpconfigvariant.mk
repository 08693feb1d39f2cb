# tools/mp32: the 32-bit test interpreter. Only what the firmware and its tests use is frozen (asyncio).
FROZEN_MANIFEST ?= $(VARIANT_DIR)/manifest.py
