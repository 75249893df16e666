"""Writes outside the working directory: /tmp, /var/tmp, /dev/shm, the project, $HOME, via os.open,
a dir_fd relative to /, a symlink, a hard link, shutil, rename."""
import os
import shutil

targets = ["/tmp/pwned___NONCE__", "/var/tmp/pwned___NONCE__", "/dev/shm/pwned___NONCE__",
           "__PROJECT__/pwned___NONCE__", "__HOME__/pwned___NONCE__"]
for t in targets:
    try:
        with open(t, "w") as fh:
            fh.write("pwned")
        print("ESCAPED: open %s" % t)
    except Exception:
        pass
    try:
        fd = os.open(t + "_o", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"pwned")
        os.close(fd)
        print("ESCAPED: os.open %s" % t)
    except Exception:
        pass
try:
    root = os.open("/", os.O_RDONLY)
    fd = os.open("tmp/pwned___NONCE___dirfd", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=root)
    os.write(fd, b"pwned")
    print("ESCAPED: dir_fd")
except Exception:
    pass
try:
    os.symlink("/tmp/pwned___NONCE___link", "link")
    with open("link", "w") as fh:
        fh.write("pwned")
    print("ESCAPED: symlink")
except Exception:
    pass
try:
    os.link("__CANARY__", "hard")
    with open("hard", "a") as fh:
        fh.write("pwned")
    print("ESCAPED: hardlink")
except Exception:
    pass
try:
    with open("local", "w") as fh:
        fh.write("pwned")
    shutil.copy("local", "/tmp/pwned___NONCE___copy")
    print("ESCAPED: shutil.copy")
except Exception:
    pass
try:
    os.rename("local", "/tmp/pwned___NONCE___rename")
    print("ESCAPED: rename")
except Exception:
    pass


def solve():
    return 0
