# Hardware abstraction: board I/O (I2S, pins, codec chips) behind objects the runtime is handed; protocol code never imports this package.
