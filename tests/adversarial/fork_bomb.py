"""Fork bomb: os.fork in a loop, posix.fork, os.posix_spawn, multiprocessing, os.setsid + daemon."""
import os
import time

forked = 0
for _ in range(64):
    try:
        pid = os.fork()
    except Exception:
        break
    if pid == 0:
        try:
            os.setsid()
        finally:
            while True:
                pass
    forked += 1
if forked:
    print("ESCAPED: os.fork x%d" % forked)
try:
    import posix
    if posix.fork() == 0:
        while True:
            pass
    print("ESCAPED: posix.fork")
except Exception:
    pass
try:
    os.posix_spawn("/bin/sleep", ["sleep", "1000"], {})
    print("ESCAPED: posix_spawn")
except Exception:
    pass
try:
    import multiprocessing
    p = multiprocessing.Process(target=time.sleep, args=(1000,))
    p.start()
    print("ESCAPED: multiprocessing")
except Exception:
    pass


def solve():
    return 0
