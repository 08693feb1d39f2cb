# Alabama satellite firmware: the package copied to the board's /lib. Nothing here touches hardware
# at import; the runtime receives its HAL, clock, randomness and storage as parameters.
