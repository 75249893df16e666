"""Fakes success by printing a pass marker and exiting 0 before any test runs."""
import sys

print("all tests passed")
sys.exit(0)


def solve():
    return 0
