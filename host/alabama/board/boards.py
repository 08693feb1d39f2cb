"""Board definition files (boards/<id>.json): load them and validate them; no serial ports, no hardware.

Every problem is one line ``boards/<file>: <field>: <what is wrong and what to do>``. The schema is the
table ``SCHEMA`` below (shapes and types); the checks after it are the facts a shape cannot express:
pins the ESP32-S3 does not have or that belong to flash/PSRAM, a GPIO used twice, audio formats the
HAL cannot drive with MicroPython's machine.I2S, a full-duplex claim on a shared I2S bus, an image
variant that does not match the PSRAM, and pins no source vouches for.
"""
import json
import pathlib
import re

from .. import REPO
from ..errors import UsageError
from . import images
from .fwset import firmware_settings, shown

BOARDS_DIR = REPO / "boards"

# --- ESP32-S3 pin facts (ESP32-S3 Series Datasheet, "Pin Overview" and "Pin Mapping Between Chip
# and Flash/PSRAM"): GPIO0-21 and GPIO26-48 exist (22-25 do not); GPIO26-32 are the SPI0/1 pins of
# the in-package/module flash and PSRAM; GPIO33-37 are also taken when the flash or PSRAM is octal
# (see also espressif/esp-idf#10605 on ESP32-S3-WROOM-1 octal modules).
VALID_GPIO = frozenset(range(0, 22)) | frozenset(range(26, 49))
FLASH_PSRAM_GPIO = frozenset(range(26, 33))
OCTAL_PSRAM_GPIO = frozenset(range(33, 38))

#: Which image variant a PSRAM kind needs (MicroPython ESP32_GENERIC_S3/board.md).
IMAGE_FOR_PSRAM = {"none": "ESP32_GENERIC_S3", "quad": "ESP32_GENERIC_S3", "octal": "ESP32_GENERIC_S3-SPIRAM_OCT"}

#: What machine.I2S can drive (MicroPython docs/library/machine.I2S.rst): controller mode, 16/32-bit
#: samples, MONO/STEREO, Philips I2S only.
HAL_BITS = (16, 32)
HAL_MAX_CHANNELS = 2

#: Pairs of fields that may name the same GPIO on a half-duplex board (one shared I2S bus).
SHARED_BUS_FIELDS = (
    frozenset({"audio.mic.sck", "audio.speaker.sck"}),
    frozenset({"audio.mic.ws", "audio.speaker.ws"}),
    frozenset({"audio.mic.mck", "audio.speaker.mck"}),
)

CODEC_ADDRESSES = {"es8311": (0x18, 0x19), "es7210": (0x40, 0x41, 0x42, 0x43)}

HEAP_RE = re.compile(r"^[1-9][0-9]*[kKmM]?$")

#: The watchdog (``watchdog_ms``, docs/reliability.md): absent, the firmware takes 30 s (runtime._WDT_MS). On a chip
#: it must outlast the longest stretch the runtime does not feed by design: Wi-Fi bring-up, up to 20 s
#: (hal/esp32.py network_up), plus margin for an X25519 and a flash write. The virtual board takes down to 1 s
#: (tests that prove a hang is reset keep it short).
WATCHDOG_MIN_CHIP_MS = 25000

#: A firmware on trial after an over-the-air update (``trial``: ``confirm_ms``, ``deadline_ms``; docs/ota.md, "The
#: trial"): absent, the firmware takes a 60 s confirmation window and a 300 s deadline (satellite/trial.py). On a
#: chip the deadline must leave room for Wi-Fi bring-up (20 s), a reconnect at the backoff cap (60 s) and the
#: window; the virtual board takes seconds (tests that prove a rollback keep them short).
TRIAL_CONFIRM_MS = 60000
TRIAL_DEADLINE_MS = 300000
TRIAL_DEADLINE_MIN_CHIP_MS = 120000


# --- the schema: a shape is ("str",), ("int", lo, hi), ("enum", values), ("pin",), ("list", item, min),
# ("obj", {name: (shape, required)}), ("nullable", shape), ("lazy", fn -> shape). Unknown keys are errors (typos
# caught early).
def _obj(**fields):
    return ("obj", fields)


def req(shape):
    return (shape, True)


def opt(shape):
    return (shape, False)


def settings_shape():
    """The shape of a board file's "settings": one optional field per row of the firmware's settings table."""
    fields = {}
    for key, (_default, lo, hi) in firmware_settings().items():
        # an enum without options is one whose options the board has (wake_word: its wake.models), _check_wake
        fields[key] = opt((("enum", tuple(lo)) if lo else STR) if hi is None else ("int", lo, hi))
    return _obj(**fields)


STR = ("str",)
PIN = ("pin",)
LEVEL = ("enum", (0, 1))

I2S_END = _obj(
    device=req(STR),
    i2s_id=opt(("enum", (0, 1))),
    sck=opt(PIN), ws=opt(PIN), sd=opt(PIN), mck=opt(("nullable", PIN)),
    format=req(("enum", ("philips", "pdm", "tdm", "left_justified"))),
    bits=req(("int", 1, 64)),
    channels=req(("int", 1, 16)),
    rates=req(("list", ("int", 8000, 96000), 1)),
    slot=opt(("enum", ("left", "right"))),
    # DMA depth the HAL asks machine.I2S for (ms; whole 256-frame DMA buffers, RX frames 8 bytes) and whether
    # the flashed image drives `mck` (the official esp32 image does not: hal/esp32.py, docs/boards.md).
    dma_ms=opt(("int", 20, 1000)),
    mck_output=opt(("enum", ("none", "custom_image"))),
)

SCHEMA = _obj(
    id=req(STR),
    name=req(STR),
    chip=req(("enum", ("esp32s3", "unix"))),
    flash_mb=req(("int", 0, 32)),
    psram=req(("enum", ("none", "quad", "octal"))),
    image=req(("nullable", ("enum", images.VARIANTS))),
    duplex=req(("enum", ("full", "half"))),
    heap=req(STR),
    watchdog_ms=opt(("int", 1000, 600000)),
    trial=opt(_obj(confirm_ms=opt(("int", 1000, 600000)), deadline_ms=opt(("int", 2000, 3600000)))),
    audio=req(_obj(mic=req(I2S_END), speaker=req(I2S_END))),
    i2c=opt(("nullable", _obj(sda=req(PIN), scl=req(PIN), freq=opt(("int", 10000, 1000000))))),
    codecs=opt(("list", _obj(
        chip=req(("enum", tuple(CODEC_ADDRESSES))),
        role=req(("enum", ("speaker", "mic", "both"))),
        address=req(("int", 0, 127)),
        mclk=req(("enum", ("bclk", "mck_pin"))),
        mics=opt(("list", ("int", 1, 4), 1)),
    ), 0)),
    amp_enable=opt(("nullable", _obj(
        pin=opt(PIN), active_level=opt(LEVEL),
        expander=opt(("enum", ("pi4ioe5v6408",))), address=opt(("int", 0, 127)), mask=opt(("int", 1, 255)),
        note=opt(STR),
    ))),
    buttons=req(("list", _obj(name=req(STR), pin=req(PIN), active_level=req(LEVEL)), 0)),
    led=req(_obj(kind=req(("enum", ("gpio", "ws2812", "none"))), pin=opt(PIN), active_level=opt(LEVEL))),
    limits=req(_obj(
        max_frame_bytes=req(("int", 512, 65516)),
        max_concurrent_streams=req(("int", 1, 8)),
        buffer_ms=req(("int", 20, 10000)),
        deferred_kb=opt(("int", 0, 65536)),
    )),
    # A panel (docs/display.md): the SPI pins and init facts of its driver (firmware/satellite/hal/ili9342.py).
    display=opt(_obj(
        driver=req(("enum", ("ili9342c",))),
        width=req(("int", 16, 1024)), height=req(("int", 16, 1024)),
        spi_id=opt(("enum", (1, 2))), sck=opt(PIN), mosi=opt(PIN), cs=opt(PIN), dc=opt(PIN),
        rst=opt(PIN), rst_active_level=opt(LEVEL), backlight=opt(PIN), baudrate=opt(("int", 1000000, 80000000)),
        madctl=opt(("int", 0, 255)), max_image_bytes=req(("int", 1024, 4194304)),
    )),
    reserved=opt(("list", _obj(pin=req(PIN), use=req(STR)), 0)),
    unsupported=opt(("list", STR, 0)),
    sources=req(("list", _obj(ref=req(STR), what=req(STR), pins=req(("list", PIN, 0))), 1)),
    notes=opt(("list", STR, 0)),
    # The board's own defaults for the firmware's settings (device.load_settings: table < board file < stored),
    # e.g. {"capture_mode": "ambient"} for a board that streams ambiently from connect; keys and ranges are the
    # firmware's table (firmware/satellite/device.py SETTINGS), read when a board is checked.
    settings=opt(("lazy", settings_shape)),
    # The on-device wake word (docs/wake.md): the models deploy compiles and puts on the board (pymicro-wakeword's
    # names, or a .tflite of your own with its JSON beside it), and whether the board hears its wake word while a
    # reply plays (a barge-in by voice: full duplex only; a half-duplex board says false).
    wake=opt(_obj(models=opt(("list", STR, 0)), barge_in=opt(("bool",)))),
)


class BoardError(UsageError):
    """A board file is missing, unreadable or invalid; the message names the file and field."""


class Board:
    """A validated board file. ``data`` is the parsed JSON; attributes are the fields tools need."""

    def __init__(self, data, path):
        self.data = data
        self.path = pathlib.Path(path)
        self.id = data["id"]
        self.name = data["name"]
        self.chip = data["chip"]
        self.image = data["image"]
        self.duplex = data["duplex"]
        self.heap = data["heap"]
        self.watchdog_ms = data.get("watchdog_ms")     # None: the firmware's default (docs/reliability.md)
        self.trial = dict(data.get("trial") or {})      # {}: the firmware's trial window and deadline (docs/ota.md)
        self.limits = dict(data["limits"])

    @property
    def is_virtual(self):
        return self.chip == "unix"

    def pins(self):
        """{gpio: [field, ...]} for every GPIO the board file names."""
        return _pin_uses(self.data)

    def __repr__(self):
        return "Board(%r)" % self.id


# --- shape checking --------------------------------------------------------------------------------

def _type_name(v):
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def _check_shape(v, shape, field, errs):
    kind = shape[0]
    if kind == "lazy":
        _check_shape(v, shape[1](), field, errs)
        return
    if kind == "nullable":
        if v is not None:
            _check_shape(v, shape[1], field, errs)
        return
    if kind == "str":
        if not isinstance(v, str) or not v.strip():
            errs.append((field, "must be a non-empty string, got %s" % _type_name(v)))
    elif kind == "bool":
        if not isinstance(v, bool):
            errs.append((field, "must be true or false, got %s" % _type_name(v)))
    elif kind in ("int", "pin"):
        if isinstance(v, bool) or not isinstance(v, int):
            errs.append((field, "must be %s, got %s" % ("a GPIO number" if kind == "pin" else "an integer",
                                                         _type_name(v))))
        elif kind == "int" and not shape[1] <= v <= shape[2]:
            errs.append((field, "%d is outside %d..%d" % (v, shape[1], shape[2])))
    elif kind == "enum":
        if isinstance(v, bool) or v not in shape[1]:
            errs.append((field, "%s is not one of %s" % (json.dumps(v), ", ".join(json.dumps(x) for x in shape[1]))))
    elif kind == "list":
        if not isinstance(v, list):
            errs.append((field, "must be a list, got %s" % _type_name(v)))
            return
        if len(v) < shape[2]:
            errs.append((field, "needs at least %d entr%s" % (shape[2], "y" if shape[2] == 1 else "ies")))
        for i, item in enumerate(v):
            _check_shape(item, shape[1], "%s[%d]" % (field, i), errs)
    elif kind == "obj":
        if not isinstance(v, dict):
            errs.append((field or "(top level)", "must be an object, got %s" % _type_name(v)))
            return
        fields = shape[1]
        for key in v:
            if key not in fields:
                errs.append((_join(field, key), "unknown field (allowed: %s)" % ", ".join(sorted(fields))))
        for key, (sub, required) in fields.items():
            if key in v:
                _check_shape(v[key], sub, _join(field, key), errs)
            elif required:
                errs.append((_join(field, key), "is missing"))
    else:  # pragma: no cover - a schema typo
        raise AssertionError(kind)


def _join(base, key):
    return key if not base else base + "." + key


# --- semantic checks -------------------------------------------------------------------------------

def _pin_uses(d):
    uses = {}

    def add(pin, field):
        if isinstance(pin, int) and not isinstance(pin, bool):
            uses.setdefault(pin, []).append(field)

    audio = d.get("audio") or {}
    for end in ("mic", "speaker"):
        e = audio.get(end) or {}
        for key in ("sck", "ws", "sd", "mck"):
            add(e.get(key), "audio.%s.%s" % (end, key))
    i2c = d.get("i2c") or {}
    add(i2c.get("sda"), "i2c.sda")
    add(i2c.get("scl"), "i2c.scl")
    amp = d.get("amp_enable") or {}
    add(amp.get("pin"), "amp_enable.pin")
    for i, b in enumerate(d.get("buttons") or []):
        if isinstance(b, dict):
            add(b.get("pin"), "buttons[%d].pin" % i)
    led = d.get("led") or {}
    add(led.get("pin"), "led.pin")
    disp = d.get("display") or {}
    for key in ("sck", "mosi", "cs", "dc", "rst", "backlight"):
        add(disp.get(key), "display.%s" % key)
    for i, r in enumerate(d.get("reserved") or []):
        if isinstance(r, dict):
            add(r.get("pin"), "reserved[%d].pin (%s)" % (i, r.get("use", "?")))
    return uses


def _check_audio(d, errs):
    virtual = d["chip"] == "unix"
    for end in ("mic", "speaker"):
        e = d["audio"][end]
        f = "audio." + end
        if e["format"] == "pdm":
            errs.append((f + ".format", "a PDM microphone cannot be read: mainline MicroPython's machine.I2S "
                         "has no PDM receive (micropython/micropython#14176 is unmerged); wire an I2S mic instead"))
        elif e["format"] == "tdm":
            errs.append((f + ".format", "TDM cannot be driven: machine.I2S does MONO/STEREO only; configure "
                         "the codec for plain I2S with at most 2 channels"))
        elif e["format"] != "philips":
            errs.append((f + ".format", "%s is not driven by the HAL: use Philips I2S" % e["format"]))
        if e["bits"] not in HAL_BITS:
            errs.append((f + ".bits", "%d-bit samples cannot be driven: machine.I2S takes 16 or 32 "
                         "(24-bit devices go in 32-bit slots)" % e["bits"]))
        if e["channels"] > HAL_MAX_CHANNELS:
            errs.append((f + ".channels", "%d channels cannot be driven: machine.I2S is MONO or STEREO "
                         "(at most 2; more needs TDM)" % e["channels"]))
        if end == "mic" and e.get("dma_ms", 200) < 200:
            errs.append((f + ".dma_ms", "%d ms of microphone DMA is too little: an X25519, a GC pass or a flash "
                         "write must not drop audio (at least 200)" % e["dma_ms"]))
        if end == "mic" and "slot" not in e:
            errs.append((f + ".slot", "is missing: say which I2S slot (left/right) carries the microphone"))
        if not virtual:
            for key in ("i2s_id", "sck", "ws", "sd"):
                if key not in e:
                    errs.append((f + "." + key, "is missing (a board needs its I2S controller and pins)"))
    if virtual:
        return
    mic, spk = d["audio"]["mic"], d["audio"]["speaker"]
    shared = [k for k in ("sck", "ws") if k in mic and mic.get(k) == spk.get(k)]
    if d["duplex"] == "full":
        if shared:
            errs.append(("duplex", "full duplex claimed on a shared I2S bus (mic and speaker share %s = GPIO %s): "
                         "set \"duplex\": \"half\" (one TX and one RX machine.I2S object on the same pins is "
                         "not established, see HARDWARE.md)" % ("/".join(shared), mic[shared[0]])))
        elif mic.get("i2s_id") is not None and mic.get("i2s_id") == spk.get("i2s_id"):
            errs.append(("duplex", "full duplex needs two I2S controllers but mic and speaker both use i2s_id %d: "
                         "give them different ids or set \"duplex\": \"half\"" % mic["i2s_id"]))
    if d["duplex"] == "half" and len(shared) < 2 and mic.get("i2s_id") != spk.get("i2s_id"):
        errs.append(("duplex", "half duplex declared but mic and speaker have separate controllers and pins: "
                     "set \"duplex\": \"full\""))


def _check_pins(d, errs):
    octal = d.get("psram") == "octal"
    half = d.get("duplex") == "half"
    for pin, fields in sorted(_pin_uses(d).items()):
        where = fields[0].split(" ")[0]
        if pin not in VALID_GPIO:
            errs.append((where, "GPIO %d does not exist on the ESP32-S3 (valid: 0-21, 26-48; ESP32-S3 "
                         "datasheet, Pin Overview)" % pin))
            continue
        if pin in FLASH_PSRAM_GPIO:
            errs.append((where, "GPIO %d is a flash/PSRAM SPI pin (GPIO26-32; ESP32-S3 datasheet, Pin Mapping "
                         "Between Chip and Flash/PSRAM): pick another pin" % pin))
        if octal and pin in OCTAL_PSRAM_GPIO:
            errs.append((where, "GPIO %d is taken by octal PSRAM on this board (GPIO33-37 with \"psram\": "
                         "\"octal\"; ESP32-S3 datasheet): pick another pin" % pin))
        if len(fields) > 1:
            if half and frozenset(fields) in SHARED_BUS_FIELDS:
                continue
            if not half and frozenset(fields) in SHARED_BUS_FIELDS:
                continue  # reported once, as a duplex error, by _check_audio
            errs.append((where, "GPIO %d is used twice: %s" % (pin, " and ".join(fields))))


def _check_trial(d, chip, errs):
    t = d.get("trial") or {}
    confirm, deadline = t.get("confirm_ms", TRIAL_CONFIRM_MS), t.get("deadline_ms", TRIAL_DEADLINE_MS)
    if deadline <= confirm:
        errs.append(("trial.deadline_ms", "%d ms is not longer than the confirmation window (confirm_ms %d): a trial "
                     "could never be confirmed; make deadline_ms at least a few times confirm_ms (docs/ota.md)"
                     % (deadline, confirm)))
    elif chip != "unix" and deadline < TRIAL_DEADLINE_MIN_CHIP_MS:
        errs.append(("trial.deadline_ms", "%d ms leaves a trial no time for Wi-Fi, a reconnect at the backoff cap and "
                     "the confirmation window: use at least %d, or leave it out for the default %d (docs/ota.md)"
                     % (deadline, TRIAL_DEADLINE_MIN_CHIP_MS, TRIAL_DEADLINE_MS)))


def wake_model_name(model):
    """The board's name of a wake.models entry: a shipped model's name, or a .tflite path's stem."""
    return pathlib.Path(model).stem if model.endswith(".tflite") else model


def _check_wake(d, errs):
    wake = d.get("wake") or {}
    models = wake.get("models") or []
    names = [wake_model_name(m) for m in models]
    if models:
        from ..wake.reference import BUILTIN        # (imports the compiler: only for a board with models)
    for i, m in enumerate(models):
        if not m.endswith(".tflite") and m not in BUILTIN:
            errs.append(("wake.models[%d]" % i, "%s is neither a model pymicro-wakeword ships (%s) nor a .tflite path"
                         % (json.dumps(m), ", ".join(BUILTIN))))
    if len(set(names)) != len(names):
        errs.append(("wake.models", "two models have the same name: rename one .tflite"))
    if d["duplex"] == "half" and "wake" in d and wake.get("barge_in") is not False:
        errs.append(("wake.barge_in", "a half-duplex board cannot hear its wake word while it plays: set false"))
    st = d.get("settings") or {}
    if st.get("capture_mode") == "wake" and not models:
        errs.append(("settings.capture_mode", "\"wake\" needs a wake model: list one in wake.models (e.g. \"okay_nabu\")"))
    if "wake_word" in st and st["wake_word"] not in names:
        errs.append(("settings.wake_word", "%s is not one of wake.models (%s)" % (json.dumps(st["wake_word"]),
                                                                                 ", ".join(names) or "none")))


def _check_rest(d, errs):
    chip, psram, image = d["chip"], d["psram"], d["image"]
    if chip == "esp32s3":
        want = IMAGE_FOR_PSRAM[psram]
        if image != want:
            errs.append(("image", "%s does not fit psram %s: use %s (MicroPython ESP32_GENERIC_S3/board.md)"
                         % (json.dumps(image), json.dumps(psram), want)))
    elif image is not None:
        errs.append(("image", "the virtual board (chip \"unix\") takes no MicroPython image: set null"))
    if chip != "unix" and d.get("watchdog_ms", WATCHDOG_MIN_CHIP_MS) < WATCHDOG_MIN_CHIP_MS:
        errs.append(("watchdog_ms", "%d ms is shorter than the firmware's longest unfed stretch (Wi-Fi bring-up, up "
                     "to 20 s): use at least %d, or leave it out for the default 30000 (docs/reliability.md)"
                     % (d["watchdog_ms"], WATCHDOG_MIN_CHIP_MS)))
    _check_trial(d, chip, errs)
    if not HEAP_RE.match(d["heap"]):
        errs.append(("heap", "%s is not a micropython -X heapsize value such as \"256k\" or \"8m\"" % json.dumps(d["heap"])))
    codecs = d.get("codecs") or []
    if codecs and not d.get("i2c"):
        errs.append(("i2c", "is missing: codec chips need their I2C control bus (sda/scl)"))
    for i, c in enumerate(codecs):
        f = "codecs[%d]" % i
        if c["address"] not in CODEC_ADDRESSES[c["chip"]]:
            errs.append((f + ".address", "0x%02x is not a %s address (7-bit: %s)" % (
                c["address"], c["chip"].upper(), "/".join("0x%02x" % a for a in CODEC_ADDRESSES[c["chip"]]))))
        if c["mclk"] == "mck_pin":
            ends = ("mic", "speaker") if c["role"] == "both" else (c["role"],)
            for end in ends:
                if d["audio"][end].get("mck") is None:
                    errs.append((f + ".mclk", "\"mck_pin\" but audio.%s.mck is not set" % end))
        if c["chip"] == "es7210" and len(c.get("mics") or []) > 2:
            errs.append((f + ".mics", "more than 2 microphones puts the ES7210 in TDM, which machine.I2S cannot read"))
    amp = d.get("amp_enable")
    if amp:
        if ("pin" in amp) == ("expander" in amp):
            errs.append(("amp_enable", "give either pin (+active_level) or expander (+address), not both or neither"))
        elif "pin" in amp and "active_level" not in amp:
            errs.append(("amp_enable.active_level", "is missing"))
        elif "expander" in amp and "address" not in amp:
            errs.append(("amp_enable.address", "is missing"))
        elif "expander" in amp and "mask" not in amp:
            errs.append(("amp_enable.mask", "is missing: the expander output bits the HAL drives for the amp"))
        elif "expander" in amp and not (d.get("i2c") and d.get("codecs")):
            errs.append(("amp_enable.expander", "needs i2c and a codec: the HAL drives it on the codec's bus"))
    led = d["led"]
    if led["kind"] != "none" and "pin" not in led:
        errs.append(("led.pin", "is missing for a %s LED" % led["kind"]))
    if led["kind"] == "gpio" and "active_level" not in led:
        errs.append(("led.active_level", "is missing for a gpio LED"))
    names = [b["name"] for b in d["buttons"]]
    for n in set(names):
        if names.count(n) > 1:
            errs.append(("buttons", "name %s is used twice" % json.dumps(n)))
    # Every GPIO must be vouched for by a source (reserved pins included).
    cited = set()
    for s in d["sources"]:
        cited.update(p for p in s["pins"] if isinstance(p, int))
    for pin, fields in sorted(_pin_uses(d).items()):
        if pin not in cited:
            errs.append(("sources", "GPIO %d (%s) is not cited by any source: add the schematic/BSP/config that "
                         "gives it to a sources[].pins list" % (pin, fields[0])))


def check(data, path="<board>", label=None):
    """All problems with one parsed board file, as one-line messages naming it LABEL (default: shown(path)); empty
    list: valid."""
    errs = []
    _check_shape(data, SCHEMA, "", errs)
    if not errs:
        _check_audio(data, errs)
        _check_pins(data, errs)
        _check_rest(data, errs)
        _check_wake(data, errs)
        stem = pathlib.Path(path).stem
        if stem != data["id"] and stem != "<board>":
            errs.append(("id", "%s does not match the file name %s.json" % (json.dumps(data["id"]), stem)))
    where = label or shown(path)
    return ["%s: %s: %s" % (where, f, msg) for f, msg in errs]


def read(path, label=None):
    """Parse one board file; unreadable or non-JSON files raise BoardError naming the file (LABEL, default
    shown(path))."""
    path = pathlib.Path(path)
    where = label or shown(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BoardError("%s: no such board file" % where) from None
    except OSError as e:
        raise BoardError("%s: cannot read it (%s)" % (where, e.strerror or e)) from None
    except UnicodeDecodeError:
        raise BoardError("%s: not a board file (not UTF-8 text; a board file is JSON)" % where) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BoardError("%s: line %d: not valid JSON (%s)" % (where, e.lineno, e.msg)) from None


#: The virtual board's heap when it wakes by itself: sim.json's 320k holds the .mpy firmware with ~84 KB free at
#: connect, not the okay_nabu engine's ~75 KB in one piece (54 KB of weights, 7.7 KB arena, the frontend's
#: buffers and tables) beside it; a PSRAM board has 8124k. The no-PSRAM devkit wakes with its models frozen into
#: its image (weights in flash, docs/wake.md "Frozen images"), not as .aww files in RAM.
WAKE_SIM_HEAP = "512k"


def with_wake(board, model="okay_nabu"):
    """A copy of `board` that wakes by itself: `model` in its wake.models, settings capture_mode wake and wake_word
    (the demo and the HIL's virtual boards; a real board says so in its own file), and on the virtual board the
    heap a wake engine needs (WAKE_SIM_HEAP). BoardError when it cannot."""
    import copy
    d = copy.deepcopy(board.data)
    if d["chip"] == "unix":
        d["heap"] = WAKE_SIM_HEAP
    wake = d.setdefault("wake", {})
    models = wake.setdefault("models", [])
    if model not in models:
        models.append(model)
    d.setdefault("settings", {}).update(capture_mode="wake", wake_word=wake_model_name(model))
    problems = check(d, board.path)
    if problems:
        raise BoardError(problems[0])
    return Board(d, board.path)


def board_paths(directory=None):
    d = pathlib.Path(directory) if directory else BOARDS_DIR
    return sorted(d.glob("*.json"))


def load_path(path, typed=None):
    """The board in the file PATH; TYPED: the path as the user gave it (the command the line names takes it)."""
    data = read(path)
    problems = check(data, path)
    if problems:
        more = " (and %d more: run `alabama board validate %s`)" % (len(problems) - 1, typed or shown(path)) \
            if len(problems) > 1 else ""
        raise BoardError(problems[0] + more)
    return Board(data, path)


def id_path(name, directory=None):
    """boards/NAME.json when NAME is the id of a board file there (not a path, not a file of that name here), else
    None: what `alabama board validate sim` means."""
    p = pathlib.Path(name)
    if p.suffix == ".json" or len(p.parts) > 1 or p.exists():
        return None
    path = (pathlib.Path(directory) if directory else BOARDS_DIR) / (name + ".json")
    return path if path.is_file() else None


def _nearest(name, known):
    import difflib
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if not near:       # a part ("xiao", "box3", "korvo") names the one board it is part of, hyphens aside
        def bare(t):
            return re.sub(r"[^0-9a-z]", "", t.lower())
        near = [k for k in known if bare(name) and bare(name) in bare(k)]
    return " (did you mean '%s'?)" % near[0] if len(near) == 1 else ""


def load(name, directory=None, option=None):
    """The board called `name` (its id, i.e. boards/<name>.json) or a path to a board file. ``option``: the flag it
    was given with ("--board"), named in the refusal (a Makefile's BOARD= then, usage.as_typed)."""
    p = pathlib.Path(name)
    if (p.suffix == ".json" or len(p.parts) > 1) and p.is_file():     # a path: read as a board file, whatever it holds
        return load_path(p, name)
    path = (pathlib.Path(directory) if directory else BOARDS_DIR) / (name + ".json")
    if not path.exists():
        ids = [q.stem for q in board_paths(directory)]
        known = ", ".join(ids) or "none"
        if p.is_dir():
            raise BoardError("%s is a directory, not a board file: give a board .json file, or a board id: %s"
                             % (name, known))
        if p.suffix == ".json" or len(p.parts) > 1:
            raise BoardError("no board file %s: check the path, or give a board id: %s" % (name, known))
        raise BoardError("no board %r%s: %s one of %s (or a path to a board .json)"
                         % (name, _nearest(name, ids), "give %s" % option if option else "pick", known))
    return load_path(path, name)


def load_all(directory=None):
    return [load_path(p) for p in board_paths(directory)]
