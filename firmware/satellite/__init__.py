# Alabama satellite firmware: the package copied to the board's /lib. Nothing here touches hardware
# at import; the runtime receives its HAL, clock, randomness and storage as parameters.

# The firmware's version: its one owner. Hello's software string and device.info report it; the host reads it
# from this file (alabama.board.fwset) for the deploy and OTA manifests.
VERSION = "0.1.0"
