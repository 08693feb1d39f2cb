# Runs on the board (MicroPython), sent by alabama.board.deploy before copying: drop stale owned files (and the
# manifest, rewritten last, so a half-finished deploy never looks finished), remove the owned directories left
# empty, then create the directories the copies need. The host sends this file's text followed by one call:
# run(remove, rmdirs, mkdirs).
import os


def run(remove, rmdirs, mkdirs):
    for p in remove:
        try:
            os.remove(p)
        except OSError:
            pass
    for d in rmdirs:
        try:
            os.rmdir(d)
        except OSError:
            pass
    for d in mkdirs:
        try:
            os.mkdir(d)
        except OSError:
            pass
