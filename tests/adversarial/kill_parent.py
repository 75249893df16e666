"""Kills the supervisor, the test process, a victim, its process group and everything (-1)."""
import os
import signal

for name, attempt in [
    ("kill ppid", lambda: os.kill(os.getppid(), signal.SIGKILL)),
    ("killpg ppid", lambda: os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)),
    ("kill test", lambda: os.kill(__TEST_PID__, signal.SIGKILL)),
    ("kill victim", lambda: os.kill(__VICTIM_PID__, signal.SIGKILL)),
    ("killpg victim", lambda: os.killpg(__VICTIM_PID__, signal.SIGKILL)),
    ("kill -1", lambda: os.kill(-1, signal.SIGKILL)),
    ("pthread_kill", lambda: signal.pthread_kill(1, signal.SIGKILL)),
]:
    try:
        attempt()
        print("ESCAPED: %s" % name)
    except Exception:
        pass


def solve():
    return 0
