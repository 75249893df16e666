"""Memory bomb: allocate far more than the address-space limit, at load time."""
hoard = []
while True:
    hoard.append(bytearray(64 << 20))


def solve():
    return 42
