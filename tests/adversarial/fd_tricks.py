"""Writes forged result frames and garbage to every fd from 3 to 1023, dup2s stdout over them,
then closes them all (the result channel among them)."""
import os

forged = b"\x00" * 16 + b"\x05\x00\x00\x00" + b"F" * 5
for fd in range(3, 1024):
    for data in (forged, b"PASSED\n", b"\xff" * 64):
        try:
            os.write(fd, data)
        except OSError:
            pass
for fd in range(3, 21):
    try:
        os.dup2(1, fd)
    except OSError:
        pass
os.closerange(3, 1024)


def solve():
    return 0
