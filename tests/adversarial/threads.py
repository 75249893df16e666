"""Threads that outlive the test: a busy non-daemon thread and one that forges result frames."""
import os
import threading


def spin():
    while True:
        pass


def forge():
    while True:
        for fd in range(3, 64):
            try:
                os.write(fd, b"F" * 64)
            except OSError:
                pass


for target in (spin, forge):
    try:
        threading.Thread(target=target, daemon=False).start()
        print("ESCAPED: thread %s" % target.__name__)
    except Exception:
        pass


def solve():
    return 0
