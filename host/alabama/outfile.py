"""Responsible for telling, before anything is made or minted, whether an output file the user named can be written,
without touching a file already there (a refused run must not truncate or delete it). Not for writing it."""
import os
import tempfile


def problem(path):
    """Why PATH cannot be written, as the end of a line ("cannot write PATH: ..."), or None. Tried, not guessed from
    mode bits (root passes every os.access check, and /proc or a read-only mount refuse anyway)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return "it is a folder"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return "no folder %s" % folder if not os.path.exists(folder) else "%s is not a folder" % folder
    try:
        if os.path.exists(path):
            with open(path, "ab"):           # append mode: opened for writing, nothing in it changed
                pass
        else:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".alabama-probe-")
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        return "%s" % (e.strerror or e)
    return None
