"""Exits 0 from inside the function under test (SystemExit, exit(), KeyboardInterrupt)."""
import sys

calls = [0]


def solve():
    calls[0] += 1
    if calls[0] == 1:
        sys.exit(0)
    if calls[0] == 2:
        exit()
    raise KeyboardInterrupt
