"""Unbounded recursion with the recursion limit raised to 10**8 (C stack exhaustion)."""
import sys

sys.setrecursionlimit(10 ** 8)


def solve(n=0):
    return solve(n + 1) + 1
