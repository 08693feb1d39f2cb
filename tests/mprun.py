# Runs the test_* functions of one dual test file under the micropython unix port.
# Output: for each test a block "@@PASS name" or "@@FAIL name" followed by the traceback,
# then a closing line "N passed, N failed". Exit status 1 when anything failed.
import sys

try:
    import io
    import time
except ImportError:
    raise SystemExit("mprun needs io and time")

path = sys.argv[1]
only = sys.argv[2:]
d, _, name = path.rpartition("/")
if d and d not in sys.path:
    sys.path.insert(0, d)
mod = __import__(name[:-3])
names = sorted(n for n in dir(mod) if n.startswith("test_") and (not only or n in only))
passed = failed = 0
for n in names:
    f = getattr(mod, n)
    try:
        f()
    except Exception as e:  # report every failure and carry on with the next test
        failed += 1
        buf = io.StringIO()
        sys.print_exception(e, buf)
        print("@@FAIL " + n)
        print(buf.getvalue())
    else:
        passed += 1
        print("@@PASS " + n)
print("mprun: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
