"""Wake-word models for the board: responsible for turning a microWakeWord .tflite into the board's model file
(compile.py) and for the host's reference runs of it; not for running anything on the board."""
