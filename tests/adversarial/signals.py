"""Signals: an alarm whose handler exits 0 mid-test, SIGTERM/SIGKILL to itself, SIGSEGV."""
import os
import signal


def handler(signum, frame):
    raise SystemExit(0)


try:
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
except Exception:
    pass


def solve():
    for sig in (signal.SIGTERM, signal.SIGSEGV):
        try:
            os.kill(os.getpid(), sig)
        except Exception:
            pass
    try:
        signal.raise_signal(signal.SIGKILL)
    except Exception:
        pass
    import time
    time.sleep(0.2)
    return 0
