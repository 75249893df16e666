"""Looks for the harness's secret and state: frames (sys._getframe, tracebacks, generators,
settrace, setprofile, inspect), gc scans, ctypes memory access, /proc/self/mem, subinterpreters,
__main__, audit-hook tricks; tries to replace harness functions (os.write, marshal.dumps, exec)."""
import sys


def attempt(name, fn):
    try:
        fn()
        print("ESCAPED: %s" % name)
    except Exception:
        pass


attempt("_getframe", lambda: sys._getframe(1).f_locals)
attempt("inspect", lambda: __import__("inspect").currentframe().f_back.f_locals)


def tb():
    try:
        raise ValueError
    except ValueError as e:
        return e.__traceback__.tb_frame.f_back


def gen_frame():
    g = (i for i in range(1))
    return g.gi_frame


attempt("tb_frame", tb)
attempt("gi_frame", gen_frame)
attempt("settrace", lambda: sys.settrace(lambda *a: None))
attempt("setprofile", lambda: sys.setprofile(lambda *a: None))
attempt("gc.get_objects", lambda: __import__("gc").get_objects())
attempt("gc.get_referrers", lambda: __import__("gc").get_referrers(sys))
attempt("ctypes", lambda: __import__("ctypes").string_at(id(sys), 64))
attempt("ctypes-libc", lambda: __import__("ctypes").CDLL(None).getpid())
attempt("proc-mem", lambda: open("/proc/self/mem", "rb").read(1))
attempt("subinterpreters", lambda: __import__("_xxsubinterpreters").create())
seen = []
try:  # CPython swallows a hook's refusal here, so check whether the new hook really runs
    sys.addaudithook(lambda event, args: seen.append(event))
    __import__("os").listdir(".")
    if seen:
        print("ESCAPED: addaudithook")
except Exception:
    pass
import marshal
import os

real_write = os.write
os.write = lambda fd, data: real_write(fd, data.replace(b"\x00", b"\x01"))
marshal.dumps = lambda obj, *a: b""
main = sys.modules.get("__main__")
attempt("__main__ harness", lambda: [getattr(main, n) for n in ("_runner", "_job_child")])
attempt("exit.__globals__", lambda: exit.__globals__["_runner"])


def solve():
    return 0
