# Runs on the board (MicroPython), sent by alabama.board.mpremote.probe: the sha256 of every file deploy owns,
# plus the .mpy ABI the board loads and whether the firmware is frozen into its image. It creates nothing and
# deletes nothing. The host sends this file's text followed by one call: run(top, owned dirs, mark).
import os, sys, json, hashlib, binascii


def _h(p):
    h = hashlib.sha256()
    b = bytearray(512)
    with open(p, 'rb') as f:
        while True:
            n = f.readinto(b)
            if not n:
                break
            h.update(b if n == 512 else b[:n])
    return binascii.hexlify(h.digest()).decode()


def _walk(d, out):
    try:
        it = list(os.ilistdir(d))
    except OSError:
        return
    for e in it:
        p = d + '/' + e[0]
        if e[1] & 0x4000:
            _walk(p, out)
        else:
            out[p] = _h(p)


def _frozen():
    # Is the firmware frozen into the image? Import it from '.frozen' alone (the filesystem's copy, if any, is
    # not looked at), with the digest module `alabama image` freezes beside it; then put sys.path and
    # sys.modules back. Returns (the frozen package's __file__ or '', the image's firmware digest or '', the
    # names of the wake models frozen in: alabama_wake.NAMES).
    fz, fd, fw, sp, old = '', '', [], list(sys.path), sys.modules.pop('satellite', None)
    sys.path.clear()
    sys.path.append('.frozen')
    try:
        import satellite
        fz = getattr(satellite, '__file__', '') or '.frozen'
    except ImportError:
        pass
    try:
        import alabama_image
        fd = alabama_image.DIGEST
    except (ImportError, AttributeError):
        pass
    try:
        import alabama_wake
        fw = list(alabama_wake.NAMES)
    except (ImportError, AttributeError):
        pass
    sys.path.clear()
    sys.path.extend(sp)
    sys.modules.pop('satellite', None)
    sys.modules.pop('alabama_image', None)
    sys.modules.pop('alabama_wake', None)
    if old is not None:
        sys.modules['satellite'] = old
    return fz, fd, fw


def run(top, owned, mark):
    o = {}
    for p in top:
        try:
            o[p] = _h(p)
        except OSError:
            pass
    for d in owned:
        _walk(d, o)
    fz, fd, fw = _frozen()
    print(mark + json.dumps({'mpy': getattr(sys.implementation, '_mpy', 0), 'files': o,
          'machine': getattr(sys.implementation, '_machine', sys.platform), 'cwd': os.getcwd(),
          'frozen': fz, 'frozen_digest': fd, 'frozen_wake': fw}))
