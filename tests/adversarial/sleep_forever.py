"""Sleeps forever at load (no CPU use: only the wall-clock deadline can end it)."""
import time

time.sleep(10 ** 6)


def solve():
    return 42
