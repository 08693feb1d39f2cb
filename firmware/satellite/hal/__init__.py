# Hardware abstraction: board I/O (I2S, pins, codec chips) behind objects the runtime is handed; protocol code never imports this package.
from micropython import const

# Gestures a HAL reports: hal.gesture() -> one of these, 0 when none. The one owner of these codes.
PRESS = const(1)
RELEASE = const(2)
LONG = const(3)

# ============================================================================================ THE HAL CONTRACT
# What every HAL object keeps. Comments only: they never reach .mpy or frozen code, so this costs no heap.
# Implementations: hal/esp32.py (the board), hal/sim.py (the virtual board, unix port), and the test fakes
# tests/firmware/fakehal.py (FakeHal, MicHal). tests/firmware/test_hal_contract.py runs one checklist against
# all of them: a change here goes there too.
#
# Who holds it: app.make_hal(board) builds one (esp32 on a board, sim on the unix port); app.boot hands it to
# Runtime(board, hal, ...), which shares it (rt.hal) with Satellite, Deferred, IdleDeferred, Health and
# provision.listen. Everything runs on the one asyncio loop: no member is called from an interrupt, and none
# may block for longer than a frame (20 ms) except where said.
#
# Units and formats
#   rate     Hz, one of the board file's audio.<mic|speaker>.rates (16000 on every board today).
#   nframes  audio frames (samples per channel) of ONE chunk: rate * 20 ms (320 at 16 kHz).
#   samples  what crosses the HAL is always s16 little-endian mono, 2 bytes per frame: the HAL converts
#            from/to the board's I2S format (16/32-bit, mono/stereo; satellite.audio in viper) itself.
#   buf/dst  a bytearray (or memoryview) the caller owns; `pos` is a byte offset into it, any parity.
#   ms       integer milliseconds >= 0; 0 means "now".
#   q14/q8   fixed-point factors: volume q14 (16384 = unity, audio.volume_q14 of 0..100), mic gain q8
#            (256 = unity, audio.mic_gain_q8 of 0..24 dB).
#   phase    the LED state: 0..4 PipelineState (IDLE, LISTENING, PROCESSING, SPEAKING, ERROR) and 5 =
#            deferred.LED_QUEUED ("recordings wait for the core"); anything else is shown as ERROR.
#   level    LED brightness 0..100 (the led_brightness setting; listening mode uses 20..100).
#
# Hot path: the capture and playout loops call mic_wait_ms, mic_take, mic_skip, spk_wait_ms and spk_write
# once per 20 ms frame, and the serve loop polls gesture() every few ms. These allocate NOTHING in steady
# state (0 B per call; tests/firmware/test_runtime_alloc.py and test_hal_contract.py measure gc.mem_alloc):
# every buffer is made by *_open and reused. No member is a coroutine except network_up, so a frame never
# creates a generator. Opening, closing and everything else may allocate.
#
# -- required members -------------------------------------------------------------------------------------
# log(line)                    One line of the serial log (str, no newline). The runtime's log when it is
#                              given none; app.main's boot line. Never raises.
# muted                        bool attribute: the speaker's hardware mute. Read by Satellite when a render
#                              opens and by the device.set_volume tool: while True, both answer UNAVAILABLE.
# set_volume(q14)              Speaker volume for every later spk_write. Runtime.apply_settings calls these
# set_mic_gain(q8)             three at boot and after each setting write; mic gain applies to every later
# set_led_brightness(level)    mic_take; led brightness is informational (led() gets the level each call).
# led(phase, level)            Show a phase. Satellite on each PipelineState, Deferred (1 while recording
#                              offline, 5 or 0 for the queue), listen.run while listening (see provision_led).
# gesture() -> int             The next button gesture, 0 when none: PRESS, RELEASE or LONG (above) in the
#                              order they happened, each returned once, never blocking. One hold is PRESS,
#                              then LONG once held past the long-press time (esp32: _LONG_MS = 1500 ms,
#                              debounced 30 ms; the sim's `long` command queues all three at once), then
#                              RELEASE. Polled until 0 by whoever owns the button at the time: the runtime's
#                              serve loop while a session is up (every POLL_MS), Deferred.run / IdleDeferred.run
#                              (every 10 ms) and Deferred.record while offline. A board without a button
#                              always answers 0.
# async network_up(rt)         Awaited once by Runtime.run before the first connection. Brings up the network
#                              (esp32: Wi-Fi from rt.load_record(), up to 20 s; sim: starts the control
#                              channel). Returns when up OR when it gave up: it logs why and does not raise
#                              for a missing or unreachable network (the runtime's reconnect loop retries).
#
# Microphone: mic_open, then per chunk mic_wait_ms and mic_take (or mic_skip), then mic_close.
# mic_open(rate, nframes)      Start capturing chunks of `nframes` at `rate`; allocates the HAL's own chunk
#                              buffer. Called by Satellite when a capture opens (again after a half-duplex
#                              render), Deferred.record, listen.run (16000, 320). Raises: esp32 HalError when
#                              mic_supported is False (callers check has_mic first), TypeError for a board file
#                              with mck_output "custom_image" on the official image, OSError/ValueError from
#                              machine.I2S. A second mic_open without mic_close restarts the capture.
# mic_wait_ms() -> ms          How long until the next chunk is ready; 0: mic_take it now. Real-time pacing
#                              (esp32: the I2S irq said the buffer is full; sim: the clock). Hot path.
# mic_take(dst, pos, nframes)  Write the ready chunk as s16 mono into dst[pos:pos + 2*nframes], exactly those
#                              bytes, with the mic gain applied; the next chunk starts. nframes is mic_open's.
#                              Satellite.send_chunk writes it straight into the outgoing frame's tail. Hot path.
# mic_skip()                   Drop the ready chunk unread (the socket is backed up: a lossy frame not sent).
#                              Keeps the pacing and the overrun accounting of mic_take. Hot path.
# mic_close()                  Stop capturing and release the I2S object. Idempotent: harmless when closed or
#                              never opened (Runtime._quiet_mic, finally blocks).
#
# Speaker: spk_open, then per chunk spk_wait_ms and spk_write, then spk_drain_ms and spk_close (or spk_stop).
# spk_open(rate, nframes)      Prepare to play chunks of up to `nframes` at `rate` (amp on). Satellite, when
#                              a render opens. On a half-duplex board the runtime closes the mic first; esp32
#                              closes it itself (and says so) if asked while the mic holds the shared bus.
#                              Raises OSError/ValueError from machine.I2S.
# spk_wait_ms() -> ms          How long until the speaker takes the next chunk; 0: spk_write now. Hot path.
# spk_write(buf, pos, nframes) Play nframes of s16 mono from buf[pos:pos + 2*nframes] at the set volume;
#     -> frames played         returns how many it took (nframes; fewer only past spk_open's nframes, which
#                              the runtime never writes). 0 when the speaker was never opened. Non-blocking.
#                              Satellite.play_step; the count goes into PlaybackDone. Hot path.
# spk_drain_ms() -> ms         After the last spk_write: how long what was written still plays (the DMA
#                              ring); Satellite sleeps that long before spk_close so a reply is not cut.
# spk_stop()                   Silence now, within a frame (barge-in, RenderCancelled): drops what is queued.
#                              spk_close still follows. Idempotent.
# spk_close()                  The render is over: amp off; a shared bus goes back to the mic (esp32 keeps a
#                              speaker on its own controller open for the next render). Idempotent.
#
# -- optional members: callers probe them with getattr/hasattr; meaning when absent ------------------------
# options                      dict read by app.boot for the Runtime: "duplex" ("full"|"half"), and the sim's
#                              test knobs ping_ms, backoff_base_ms, backoff_cap_ms, deferred_kb. Absent: {}.
# mic_supported                bool: False when the flashed image cannot drive this board's microphone (esp32:
#                              an ES7210 without MCLK). The runtime then declares no mic, opens no capture and
#                              does no sound provisioning. Absent: True.
# mic_error                    str, why mic_supported is False (into the UNAVAILABLE error text). Absent: "".
# mic_busy() -> bool           True while a mic_open is not yet closed. Runtime._quiet_mic calls it before every
#                              handshake and closes the mic (no X25519 while I2S RX runs). Absent: the runtime
#                              trusts its own bookkeeping.
# panel() -> panel | None      The board's display, initialised and lit; called once by Runtime.__init__ and
#                              only for a board file with a "display" section; the same object on every call.
#                              Absent, or None: no panel (no TEXT/IMAGE_DISPLAY declared). A panel has
#                              width, height (pixels), fb (bytearray width*height*2, big-endian RGB565,
#                              row-major), phase (int attribute display.py writes, 255 = none), flush(y0, y1)
#                              (show rows y0..y1-1 of fb; y1 < 0: to the end) and backlight(percent 0..100).
#                              esp32: hal/ili9342.py; sim: hal/simpanel.py. Errors of the driver propagate.
# rssi() -> dBm | None         Health (device.info, the health event): the Wi-Fi signal, None when not
# reset_cause() -> str         associated; why the board last reset (machine constant names: PWRON_RESET ...);
# flash_free() -> bytes        free bytes of the filesystem (also the OTA updater's room check);
# mic_lost_frames() -> frames  microphone frames lost to DMA overruns so far. Absent, or raising OSError,
#                              ValueError or AttributeError: reported as null (health._hal; lost frames: 0).
# wdt_start(ms)                Arm the hardware watchdog: the board resets when wdt_feed is not called within `ms`
#                              (the board file's watchdog_ms). Runtime.run calls it once, first thing; calling it
#                              again sets a new timeout and restarts the countdown. It can never be stopped: esp32
#                              machine.WDT(timeout=ms) (ports/esp32/machine_wdt.c v1.27.0: esp_task_wdt_reconfigure,
#                              then a task-WDT user that nothing removes, soft reset included); it also stops a
#                              park (below). sim: the supervisor's watchdog (docs/virtual-board.md). May raise
#                              OSError/ValueError from machine.WDT; the runtime then runs without one (logged).
# wdt_feed()                   Restart the countdown. Only the runtime calls it, and only while its loop is
#                              healthy (runtime.py, "The watchdog"), at most every ms/4. 0 B per call (it is on
#                              the serve loop's path). Harmless before wdt_start.
# wdt_park()                   The runtime stopped on purpose (Ctrl-C to the REPL, app.main): hand the armed
#                              watchdog to a feeder of the HAL's own until the next wdt_start or reset (esp32: a
#                              machine.Timer, timer PARK_TIMER, which boot.py uses after a soft reset too; sim:
#                              tells the supervisor). Harmless before wdt_start. Absent (all three): no watchdog.
# lamp_set(on)                 A lamp the device switches (bool): health declares the light.set tool and reports
# lamp                         `lamp` (bool attribute, the current state) as device.info "light". sim: a simulated
#                              room light (logs `sim: light on|off`). Absent (every real board today): no tool.
# provision_led(state, pct)    listen.run's LED when present (listen.LED_* state, progress 0..100); absent:
#                              listen maps the state to led(phase, level).
# Implementation-only members (not part of the contract, read by their own tests or tools): board, duplex,
# vol, gain, brightness; esp32's mic_overruns, mic_lost_us, mic_dma_frames, HalError; the sim's command(),
# state(), led_phase and control channel (docs/virtual-board.md).
#
# Not in the contract any more: listen.run still accepts an `async mic_wait()` in place of mic_wait_ms (an
# older HAL shape; no implementation in the tree has it, a test keeps the path alive).
