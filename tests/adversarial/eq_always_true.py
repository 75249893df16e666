"""Returns objects whose __eq__ is always True (and __ne__/__lt__/__sub__/__abs__/__bool__ lie too),
including an int subclass. With strict_equality the tests reject them; without it they pass."""


class Liar:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __lt__(self, other):
        return True

    __le__ = __gt__ = __ge__ = __lt__

    def __sub__(self, other):
        return 0

    __rsub__ = __sub__

    def __abs__(self):
        return 0

    def __bool__(self):
        return True

    def __hash__(self):
        return 0


class LiarInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


calls = [0]


def solve():
    calls[0] += 1
    return Liar() if calls[0] % 2 else LiarInt(0)
