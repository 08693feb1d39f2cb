# Runs on the board (MicroPython), sent by alabama.board.probe: the probe set's directory (outside the
# firmware's import path: '', '.frozen', '/lib'). mode 'prepare': remove what an interrupted probe left, then
# create the directory; 'load': import alabama_probe from it, then unlink its files (the module stays loaded,
# nothing of it stays on flash); 'clean': remove the directory's files and the directory. Prints
# mark + JSON. It never touches anything outside `d`. The host sends this file's text followed by one call:
# run(d, mode, mark).
import os, sys, json


def _clean(d):
    n = 0
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    for name in names:
        try:
            os.remove(d + '/' + name)
            n += 1
        except OSError:
            pass
    try:
        os.rmdir(d)
    except OSError:
        pass
    return n


def run(d, mode, mark):
    out = {'mode': mode}
    if mode == 'load':
        sys.path.insert(0, d)
        try:
            import alabama_probe  # noqa: F401 - loaded for the stages that follow (sys.modules keeps it)
        finally:
            while d in sys.path:
                sys.path.remove(d)
        out['removed'] = _clean(d)
    else:
        out['removed'] = _clean(d)
        if mode == 'prepare':
            os.mkdir(d)
    print(mark + json.dumps(out))
