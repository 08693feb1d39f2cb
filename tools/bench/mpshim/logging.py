# bench only: minipb asks for a logger at import; the micropython unix port has no logging module. Silent.
DEBUG = 10


class _Silent:
    def debug(self, *args):
        pass

    info = warning = error = debug

    def isEnabledFor(self, level):
        return False


def getLogger(name=None):
    return _Silent()


def basicConfig(**kw):
    pass
