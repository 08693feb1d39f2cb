# dual: cpython micropython
# Issue 17 (memory): a viper module whose import fails with MemoryError on a board (its machine code finds no
# room: MicroPython v1.27.0 ports/esp32/main.c esp_native_code_commit, heap_caps_malloc(MALLOC_CAP_EXEC) then
# m_malloc_fail) must leave its importer on the pure twin, as satellite.audio.load_fast does, not abort boot.
# The failure is simulated by wrapping builtins.__import__ so that every *_viper import raises MemoryError
# (the fixture _viper_mem_bomb.py does the same for load_fast); the importer is then imported afresh.
import builtins
import sys

from mpsupport import unhex
from satellite.noise import chachapoly, transport, x25519  # noqa: F401  (their dependencies are cached first)
from satellite.provision import ggwave_rx  # noqa: F401
from satellite.wire import _copy, frame  # noqa: F401
from satellite.wake import model as _wake_model  # noqa: F401

_ORIG_IMPORT = builtins.__import__
_PKG = [""]     # the package of the module being re-imported (for its relative imports)


def _bomb(name, globals=None, locals=None, fromlist=(), level=0):
    if name.endswith("_viper") or [f for f in (fromlist or ()) if f.endswith("_viper")]:
        raise MemoryError("simulated: no room for %s's native code" % (name or fromlist[0]))
    if level and globals is None:
        # MicroPython 1.26 hands an overriding __import__ no globals: resolve the relative name here
        base = _PKG[0].rsplit(".", level - 1)[0] if level > 1 else _PKG[0]
        name, level = (base + "." + name) if name else base, 0
    return _ORIG_IMPORT(name, globals, locals, fromlist, level)


def _fresh_under_bomb(modname):
    """Import `modname` again with every viper import failing with MemoryError; the original stays put."""
    saved = sys.modules.pop(modname)
    _PKG[0] = modname.rpartition(".")[0]
    builtins.__import__ = _bomb
    try:
        mod = __import__(modname, None, None, ("_",))
    finally:
        builtins.__import__ = _ORIG_IMPORT
        sys.modules[modname] = saved
    return mod


def _bomb_is_live():
    builtins.__import__ = _bomb
    try:
        from satellite.noise import _chacha_viper  # noqa: F401
    except MemoryError:
        return True
    finally:
        builtins.__import__ = _ORIG_IMPORT
    return False


def test_the_simulated_failure_is_a_memoryerror_at_import():
    assert _bomb_is_live()


def test_x25519_falls_back_to_the_pure_ladder_on_memoryerror():
    X = _fresh_under_bomb("satellite.noise.x25519")
    assert X.IMPLS == ("pure",) and X._x25519_viper is None
    # RFC 7748 section 5.2, first vector
    k = unhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
    u = unhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
    assert X.x25519(k, u) == unhex("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552")


def test_chachapoly_falls_back_to_the_pure_twins_on_memoryerror():
    C = _fresh_under_bomb("satellite.noise.chachapoly")
    # the C module (a built-in, no native code to place) stays first where the interpreter has it
    assert C.IMPLS == (("c",) if C._aead_c is not None else ()) + ("pure",) and C._chacha_viper is None
    key = bytes(range(32))
    msg = b"a 20 ms frame of audio, more or less"
    a = C.ChaChaPoly()
    a.set_key(key)
    out = bytearray(len(msg) + 16)
    a.encrypt_into(7, b"ad", msg, len(msg), out)
    ref = chachapoly.ChaChaPoly()                   # the module as loaded normally (viper where it exists)
    ref.set_key(key)
    back = bytearray(len(msg))
    ref.decrypt_into(7, b"ad", out, len(out), back)
    assert bytes(back) == msg


def test_transport_falls_back_to_the_pure_copy_on_memoryerror():
    T = _fresh_under_bomb("satellite.noise.transport")
    assert T._copy is _copy.copy
    T.use_pure_copy(False)                          # re-choosing the fast copy under the bomb stays pure too
    builtins.__import__ = _bomb
    try:
        T.use_pure_copy(False)
    finally:
        builtins.__import__ = _ORIG_IMPORT
    assert T._copy is _copy.copy


def test_ggwave_receiver_falls_back_to_the_pure_kernels_on_memoryerror():
    G = _fresh_under_bomb("satellite.provision.ggwave_rx")
    assert G._fast is None
    rx = G.GgwaveReceiver()
    assert rx._load is G._pure.load
    assert rx.feed(bytearray(2 * 1024), 1024) is None and rx.state == G.STATE_IDLE


def test_frame_reader_falls_back_to_the_pure_copy_on_memoryerror():
    F = _fresh_under_bomb("satellite.wire.frame")
    assert F.copy is _copy.copy
    r = F.FrameReader(256)
    data = F.encode_frame(b"\x08\x07", b"tail")                 # the reader copies it in with that copy
    assert r.feed(data) == len(data) and r.next() == F.FRAME
    assert (bytes(r.header()), bytes(r.tail())) == (b"\x08\x07", b"tail")


def test_wake_model_falls_back_to_the_pure_kernels_on_memoryerror():
    from satellite.wake import _model_pure
    W = _fresh_under_bomb("satellite.wake.model")
    assert not W.VIPER and W._mac is _model_pure.mac and W._dw is _model_pure.dw
