"""Infinite loop inside the function under test (CPU-bound; the CPU and wall limits must end it)."""


def solve():
    x = 0
    while True:
        x += 1
