"""C-level recursion: repr of a 10**6-deep nested list with the recursion limit lifted."""
import sys

sys.setrecursionlimit(10 ** 8)


def solve():
    x = []
    for _ in range(10 ** 6):
        x = [x]
    return len(repr(x))
