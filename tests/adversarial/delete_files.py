"""Deletes, truncates and chmods the host's canary files and their directory."""
import os
import pathlib
import shutil

for target in ("__CANARY__", "__VISIBLE_CANARY__"):
    for name, attempt in [
        ("remove", lambda: os.remove(target)),
        ("unlink", lambda: pathlib.Path(target).unlink()),
        ("truncate", lambda: os.truncate(target, 0)),
        ("open-w", lambda: open(target, "w").close()),
        ("chmod", lambda: os.chmod(target, 0)),
        ("rename", lambda: os.rename(target, target + ".moved")),
        ("rmtree", lambda: shutil.rmtree(os.path.dirname(target))),
    ]:
        try:
            attempt()
            print("ESCAPED: %s %s" % (name, target))
        except Exception:
            pass


def solve():
    return 0
