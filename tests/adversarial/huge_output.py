"""Floods stdout and stderr with gigabytes of output."""
import os
import sys

chunk = "x" * (1 << 20)
try:
    for _ in range(4096):
        sys.stdout.write(chunk)
except Exception:
    pass
try:
    for _ in range(4096):
        os.write(2, chunk.encode())
except Exception:
    pass


def solve():
    return 0
