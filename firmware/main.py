# Board entry point (runs after boot.py): start the satellite. Ctrl-C drops to the REPL, as usual. A crash
# is counted (device.info crash_count); a trial firmware that crashes resets, so otaboot can roll it back.
try:
    from satellite import app

    app.main()
except Exception as e:  # noqa: BLE001
    try:
        import otaboot
    except ImportError:   # installed without otaboot (mip): the crash is only printed
        otaboot = None
    if otaboot is not None:
        otaboot.crashed(e)
    raise
