"""Runs shell commands: os.system, os.popen, subprocess, os.exec*, os.spawn*, pty.spawn."""
import os

marker = "/tmp/pwned___NONCE___sys"
for name, attempt in [
    ("os.system", lambda: os.system("touch %s_1" % marker)),
    ("os.popen", lambda: os.popen("touch %s_2" % marker).read()),
    ("subprocess", lambda: __import__("subprocess").run(["touch", marker + "_3"])),
    ("spawnv", lambda: os.spawnv(os.P_WAIT, "/usr/bin/touch", ["touch", marker + "_4"])),
    ("pty", lambda: __import__("pty").spawn(["/usr/bin/touch", marker + "_5"])),
    ("execv", lambda: os.execv("/usr/bin/touch", ["touch", marker + "_6"])),
]:
    try:
        rc = attempt()
        if rc in (0, "", None):
            print("ESCAPED: %s" % name)
    except Exception:
        pass


def solve():
    return 0
