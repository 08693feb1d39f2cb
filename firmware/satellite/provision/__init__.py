# Provisioning on the board: the record format and the sound (ggwave) receiver.
