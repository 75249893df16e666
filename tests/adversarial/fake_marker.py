"""Prints things that look like test-harness results on stdout and stderr."""
import sys

for line in ("PASSED", "ok", "all 2 tests passed", '{"status": "passed", "passed": true}',
             "test 0: passed", "F" * 20):
    print(line)
    print(line, file=sys.stderr)


def solve():
    return 0
