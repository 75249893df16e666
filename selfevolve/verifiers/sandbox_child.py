"""The program the sandbox runs in its child interpreter (standard library only).

It holds the *zygote* (probes which kernel features work, enters the namespaces shared by its jobs
once, then forks one child per job) and the per-job *harness* (namespaces and mounts of the job,
rlimits, unprivileged uid, the audit-hook policy, pristine builtins, the strict-equality rewrite of
the tests, and the nonce-framed result reports). The isolation properties it implements are listed
in the docstring of ``selfevolve.verifiers.sandbox``.

This file is never imported. ``selfevolve.verifiers.sandbox_zygote`` reads it as text, inserts the
message framing (``sandbox_framing.py``: ``_FRAME``, ``_send_msg``, ``_recv_msg``) at its marker
below (after the imports, so nothing is imported before ``sys.path`` is scrubbed) and starts
``python -S -s -B -c <bootstrap> <that source> <socket fd>``; the bootstrap executes it with a
private copy of the builtins as its globals' ``__builtins__`` (so a program that patches the
builtins module cannot change this code) and ``__name__ == "__selfevolve_sandbox__"``.
"""
if __name__ != "__selfevolve_sandbox__":
    raise ImportError("selfevolve.verifiers.sandbox_child is the sandbox's child program; it runs only in the "
                      "sandbox interpreter (see selfevolve.verifiers.sandbox_zygote) and must not be imported")

import builtins as _B
import os, sys, io, gc, ast, types, marshal, select, socket, resource, signal, random
import ctypes
import warnings

sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]  # no cwd entry, before any import below
_PRELOAD = ("math", "cmath", "re", "string", "collections", "collections.abc", "itertools",
            "functools", "heapq", "bisect", "operator", "copy", "typing", "fractions", "decimal",
            "statistics", "json", "datetime", "enum", "dataclasses", "textwrap", "array", "numbers",
            "unicodedata", "hashlib", "time", "calendar", "pprint", "dis", "inspect",
            "traceback", "abc", "contextlib", "weakref", "struct", "base64", "binascii", "zlib",
            "difflib", "io", "warnings", "keyword", "locale", "codecs", "tempfile", "sys", "os")
for _n in _PRELOAD:
    try:
        __import__(_n)
    except Exception:
        pass
for _n in ("_posixsubprocess", "subprocess", "_xxsubinterpreters", "_ctypes_test"):
    if _n in sys.modules:  # none of the preloads should pull these in; refuse to run if they did
        raise SystemExit("sandbox zygote: module %s was preloaded" % _n)

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
SYS_MOUNT_SETATTR = 442
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def _mount(src, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    _check(_libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), "mount %s" % target)


def _prctl(op, a=0):
    _check(_libc.prctl(op, a, 0, 0, 0), "prctl %d" % op)


def _isolated(src, name, **env):
    """Define ``name`` from ``src`` in a namespace holding nothing but ``env`` (removed afterwards):
    functions that untrusted code can reach must not lead back to the harness via __globals__."""
    ns = {"__builtins__": {"__build_class__": _B.__build_class__}, "__name__": "sandbox"}
    ns.update(env)
    exec(compile(src, "<sandbox-internal>", "exec"), ns)
    fn = ns[name]
    for k in env:
        del ns[k]
    return fn


# -S leaves exit/quit undefined; programs use them. Defined in an isolated namespace.
_B.exit = _B.quit = _isolated("def exit(code=None, _SE=SystemExit):\n    raise _SE(code)\n", "exit",
                                SystemExit=SystemExit)

# pristine builtins for test code, and snapshots of every preloaded module's callables/classes
_PRISTINE_BUILTINS = dict(_B.__dict__)


def _snap(m):
    d = m.__dict__
    return (d, tuple((k, v) for k, v in d.items()
                     if isinstance(v, (type, types.ModuleType)) or callable(v)))


_MOD_SNAP = {}
for _n, _m in list(sys.modules.items()):
    if isinstance(_m, types.ModuleType) and _n not in ("__main__", "sys"):
        try:
            _MOD_SNAP[_n] = _snap(_m)
        except Exception:
            pass

# classes trusted by the strict-equality check: everything defined by builtins and preloaded modules
_TRUSTED = set()
for _n, (_d, _items) in _MOD_SNAP.items():
    for _k, _v in _items:
        if isinstance(_v, type):
            for _c in _v.__mro__:
                _TRUSTED.add(_c)
for _v in vars(types).values():
    if isinstance(_v, type):
        _TRUSTED.add(_v)
_TRUSTED_IDS = frozenset(id(_c) for _c in _TRUSTED)
_TRUSTED_KEEP = tuple(_TRUSTED)  # keeps the ids valid

_SENSITIVE = frozenset("""__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __bool__ __len__ __contains__
__iter__ __getitem__ __hash__ __abs__ __neg__ __pos__ __invert__ __round__ __trunc__ __floor__ __ceil__
__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__ __rfloordiv__
__mod__ __rmod__ __pow__ __rpow__ __divmod__ __rdivmod__ __and__ __rand__ __or__ __ror__ __xor__
__rxor__ __lshift__ __rlshift__ __rshift__ __rrshift__ __matmul__ __rmatmul__ __index__ __int__
__float__ __complex__ __getattribute__ __getattr__ __instancecheck__ __subclasscheck__""".split())

_STRICT_SRC = """
class StrictEqualityError(AssertionError):
    pass

def check(x, _type=_type, _id=_id, _T=_T, _PLAIN=_PLAIN, _SEQ=_SEQ, _MAP=_MAP, _SET=_SET,
          _mro=_mro, _tdict=_tdict, _flags=_flags, _name=_name, _S=_S, _err=StrictEqualityError,
          _liter=_liter, _titer=_titer, _ditems=_ditems, _siter=_siter, _fiter=_fiter, _HEAP=_HEAP):
    stack = [x]
    n = 0
    while stack:
        o = stack.pop()
        n += 1
        if n > 1000000:
            break
        t = _type(o)
        ti = _id(t)
        if ti in _PLAIN:
            continue
        if ti not in _T:
            for c in _mro(t):
                if _id(c) in _T or not (_flags(c) & _HEAP):
                    continue
                d = _tdict(c)
                for s in _S:
                    if s in d:
                        raise _err("strict equality: %s defines %s; values compared by tests must "
                                   "not override comparison/arithmetic dunders" % (_name(t), s))
        for c in _mro(t):
            ci = _id(c)
            if ci in _SEQ:
                stack.extend(_liter(o) if ci == _SEQ[0] else _titer(o))
                break
            if ci in _MAP:
                for kv in _ditems(o):
                    stack.append(kv[0]); stack.append(kv[1])
                break
            if ci in _SET:
                stack.extend(_siter(o) if ci == _SET[0] else _fiter(o))
                break
    return x
"""


def _make_strict_check():
    plain = frozenset(id(t) for t in (int, float, complex, str, bytes, bool, type(None), range,
                                      type, types.FunctionType, types.BuiltinFunctionType))
    check = _isolated(
        _STRICT_SRC, "check",
        _type=type, _id=id, _T=_TRUSTED_IDS, _PLAIN=plain,
        _SEQ=(id(list), id(tuple)), _MAP=(id(dict),), _SET=(id(set), id(frozenset)),
        _mro=type.__dict__["__mro__"].__get__, _tdict=type.__dict__["__dict__"].__get__,
        _flags=type.__dict__["__flags__"].__get__, _name=type.__dict__["__name__"].__get__,
        _S=tuple(sorted(_SENSITIVE)), _liter=lambda o, _l=list: _l.__iter__(o),
        _titer=lambda o, _t=tuple: _t.__iter__(o), _ditems=lambda o, _d=dict: _d.items(o),
        _siter=lambda o, _s=set: _s.__iter__(o), _fiter=lambda o, _f=frozenset: _f.__iter__(o),
        _HEAP=1 << 9, AssertionError=AssertionError)
    return check


_STRICT_CHECK = _make_strict_check()
_PROTECTED_IDS = _TRUSTED_IDS | frozenset((id(_STRICT_CHECK), id(_B.exit)))
_WRAP_CALL_ARGS = frozenset(("abs", "round", "min", "max", "sum", "sorted", "divmod", "pow", "bool"))


def _strict_rewrite(tree, tag):
    """Wrap, in place, the operands the strict-equality check must see (see the module docstring of
    sandbox.py): comparison operands (not ``is``), arithmetic/unary/boolean operands, assert and
    if/while/ternary conditions, and arguments of abs/round/min/max/sum/sorted/divmod/pow/bool.
    One pass over ``ast.walk`` (children are listed before a node is changed, so the inserted calls
    are not revisited); returns the set of names and imported modules the code mentions."""
    Call, Constant, Starred = ast.Call, ast.Constant, ast.Starred
    names = set()

    def w(node):
        if isinstance(node, Starred):
            return node
        ln, co = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
        eln, eco = getattr(node, "end_lineno", ln), getattr(node, "end_col_offset", co)
        f = Constant(tag, lineno=ln, col_offset=co, end_lineno=eln, end_col_offset=eco)
        return Call(func=f, args=[node], keywords=[], lineno=ln, col_offset=co, end_lineno=eln, end_col_offset=eco)

    for node in ast.walk(tree):
        t = type(node)
        if t is ast.Name:
            names.add(node.id)
        elif t is ast.Compare:
            if not all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                node.left = w(node.left)
                node.comparators = [w(c) for c in node.comparators]
        elif t is ast.BinOp:
            node.left, node.right = w(node.left), w(node.right)
        elif t is ast.UnaryOp:
            node.operand = w(node.operand)
        elif t is ast.BoolOp:
            node.values = [w(v) for v in node.values]
        elif t is ast.Assert or t is ast.If or t is ast.While or t is ast.IfExp:
            node.test = w(node.test)
        elif t is ast.Call:
            if type(node.func) is ast.Name and node.func.id in _WRAP_CALL_ARGS:
                node.args = [w(a) for a in node.args]
        elif t is ast.Import:
            for a in node.names:
                names.add(a.name)
                names.add(a.name.split(".")[0])
        elif t is ast.ImportFrom and node.module:
            names.add(node.module)
    return names


def _inject(code, tag, fn, _CT=types.CodeType):
    consts = []
    for c in code.co_consts:
        if type(c) is str and c == tag:
            consts.append(fn)
        elif isinstance(c, _CT):
            consts.append(_inject(c, tag, fn))
        else:
            consts.append(c)
    return code.replace(co_consts=tuple(consts))


def _compile_test(src, filename, strict):
    """Compile trusted test code (strict: rewritten, with the checker injected as a constant).
    Returns (code, names the code mentions)."""
    tree = ast.parse(src, filename, "exec")
    if strict:
        tag = "__selfevolve_strict_%s__" % os.urandom(8).hex()
        names = _strict_rewrite(tree, tag)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "'str' object is not callable" about the placeholder
            code = compile(tree, filename, "exec", dont_inherit=True)
        return _inject(code, tag, _STRICT_CHECK), names
    return compile(tree, filename, "exec", dont_inherit=True), _names_in(tree)


def _names_in(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Import):
            for a in node.names:
                out.add(a.name)
                out.add(a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


# ------------------------------------------------------------------ the audit hook (policy)

class SandboxViolation(PermissionError):
    """An operation the sandbox forbids (raised inside the job)."""


class SandboxFrameViolation(ValueError):
    """Frame introspection is not available inside the sandbox."""


_BLOCKED_EVENTS = frozenset("""os.system os.exec os.posix_spawn os.spawn os.fork os.forkpty os.startfile
subprocess.Popen pty.spawn os.kill os.killpg signal.pthread_kill os.pidfd_open
socket.__new__ socket.connect socket.bind socket.sendto socket.sendmsg socket.getaddrinfo
socket.gethostbyname socket.gethostbyname_ex socket.gethostbyaddr socket.getnameinfo socket.sethostname
socket.if_nameindex syslog.openlog syslog.syslog syslog.setlogmask syslog.closelog
sys._current_frames sys._current_exceptions sys.settrace sys.setprofile sys._setprofileallthreads
sys._settraceallthreads sys.addaudithook sys.remote_exec sys.monitoring.register_callback
gc.get_objects gc.get_referrers gc.get_referents
cpython.PyInterpreterState_New cpython._PySys_ClearAuditHooks resource.setrlimit resource.prlimit
os.chroot os.setxattr os.removexattr fcntl.ioctl mmap.__new__ winreg.OpenKey""".split())
# mmap.__new__ is allowed for anonymous maps only (see below); fcntl.ioctl blocked (TIOCSTI etc.)
_FRAME_ATTRS = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"))
_BLOCKED_IMPORTS = frozenset(("_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
                              "_interpchannels", "_interpqueues", "_ctypes", "_thread", "_signal", "_testcapi",
                              "_testinternalcapi", "_tkinter", "readline"))
_PATH_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1),
                "os.link": (0, 1), "os.symlink": (1,), "os.chmod": (0,), "os.chown": (0,),
                "os.truncate": (0,), "os.utime": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,),
                "shutil.copytree": (1,), "shutil.move": (0, 1), "os.mkfifo": (0,), "os.mknod": (0,),
                "os.lchown": (0,), "os.lchmod": (0,), "os.chflags": (0,)}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _make_hook(workdir, protected_ids, self_pid, may_setrlimit):
    realpath, fspath, isabs, join, getcwd = os.path.realpath, os.fspath, os.path.isabs, os.path.join, os.getcwd
    wd = realpath(workdir)
    wd_slash = wd.rstrip("/") + "/"
    own = str(self_pid)

    def resolve(p):
        p = fspath(p)
        if isinstance(p, bytes):
            p = p.decode("utf-8", "surrogateescape")
        if not isinstance(p, str):
            raise TypeError
        return realpath(p if isabs(p) else join(getcwd(), p))

    def inside(p):
        try:
            full = resolve(p)
        except Exception:
            return False
        return full == wd or full.startswith(wd_slash) or full == "/dev/null"

    def isdir_outside(p, _isdir=os.path.isdir):
        try:
            full = resolve(p)
        except Exception:
            return True
        return _isdir(full) and not (full == wd or full.startswith(wd_slash))

    def readable(p):
        try:
            full = resolve(p)
        except Exception:
            return True
        if full.startswith("/proc/"):
            parts = full.split("/")
            if parts[2].isdigit() and parts[2] != own:
                return False  # another process's /proc entry (environ, cmdline, fds ...)
            if parts[-1] in ("mem", "kcore", "kmem", "pagemap") or parts[2] in ("kcore", "kmem", "sysrq-trigger"):
                return False
        if full in ("/dev/mem", "/dev/kmem", "/dev/port"):
            return False
        return True

    def hook(event, args, _blocked=_BLOCKED_EVENTS, _fa=_FRAME_ATTRS, _bi=_BLOCKED_IMPORTS,
             _pe=_PATH_EVENTS, _wf=_WRITE_FLAGS, _prot=protected_ids, _id=id, _V=SandboxViolation,
             _FV=SandboxFrameViolation, _inside=inside, _readable=readable, _int=int, _isinst=isinstance,
             _rl=may_setrlimit, _isdir_outside=isdir_outside):
        if event in _blocked:
            if event == "mmap.__new__" and args and args[0] == -1:
                return
            if _rl and (event == "resource.setrlimit" or event == "resource.prlimit"):
                return  # unprivileged: the kernel only lets it lower limits (or raise soft up to hard)
            raise _V("sandbox: %s is not permitted" % event)
        if event == "open":
            path, mode, flags = args
            if path is None or _isinst(path, _int):
                return
            writing = (mode is not None and any(c in mode for c in "wax+")) or (flags is not None and flags & _wf)
            if writing and not _inside(path):
                raise _V("sandbox: writing outside the working directory is not permitted: %r" % (path,))
            if not _readable(path):
                raise _V("sandbox: opening %r is not permitted" % (path,))
            if mode is None and _isdir_outside(path):
                # a directory fd outside would make dir_fd= paths escape the checks above
                raise _V("sandbox: opening directories outside the working directory is not permitted")
            return
        if event == "sys._getframe" or event == "sys._getframemodulename":
            raise _FV("sandbox: frame introspection is not available")
        if event == "object.__getattr__":
            if args[1] in _fa:
                raise _FV("sandbox: frame introspection is not available")
            return
        if event == "object.__setattr__" or event == "object.__delattr__":
            if _id(args[0]) in _prot:
                raise _V("sandbox: modifying %s is not permitted" % (args[1],))
            return
        if event == "import":
            if args[0] in _bi:
                raise _V("sandbox: importing %s is not permitted" % (args[0],))
            return
        if event.startswith("ctypes."):
            raise _V("sandbox: ctypes is not permitted")
        idx = _pe.get(event)
        if idx is not None:
            for i in idx:
                if i < len(args) and args[i] is not None and not _isinst(args[i], _int) and not _inside(args[i]):
                    raise _V("sandbox: %s outside the working directory is not permitted" % event)
            return
        if event == "sqlite3.connect":
            db = args[0] if args else None
            if db not in (":memory:", "", b":memory:") and not _inside(db):
                raise _V("sandbox: sqlite3 files outside the working directory are not permitted")
    return hook


# ------------------------------------------------------------------ framing
# the parent inserts sandbox_framing.py (_FRAME, _send_msg, _recv_msg) in place of the next line
#@sandbox_framing.py@


# ------------------------------------------------------------------ namespaces and mounts

def _write_file(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


def _keep_paths():
    keep = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    for p in sys.path:
        if p and os.path.isdir(p):
            keep.add(os.path.realpath(p))
    return sorted(keep)


def _hidden_dirs(cfg, uid_mode):
    hide = set()
    for h in ("/root", cfg.get("home") or ""):
        if h and os.path.isdir(h) and os.path.realpath(h) not in ("/", "/tmp"):
            hide.add(os.path.realpath(h))
    if uid_mode:  # directories on the way to the Python installation that others cannot traverse
        for k in _keep_paths():
            parts = k.strip("/").split("/")
            for i in range(1, len(parts)):
                a = "/" + "/".join(parts[:i])
                try:
                    if not (os.stat(a).st_mode & 0o001):
                        hide.add(a)
                        break
                except OSError:
                    break
    out = []
    for h in sorted(hide, key=len):
        if not any(h == o or h.startswith(o + "/") for o in out):
            out.append(h)
    return out


def _kernel_at_least(major, minor):
    try:
        rel = os.uname().release.split("-")[0].split(".")
        return (int(rel[0]), int(rel[1])) >= (major, minor)
    except (ValueError, IndexError):
        return False


def _setup_base_mounts(cfg, uid_mode, hide_proc):
    """Zygote-level, once: private propagation, hidden home directories, everything read-only,
    and (when jobs have no pid namespace) a /proc that shows each uid only its own processes."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    keep = _keep_paths()
    for h in _hidden_dirs(cfg, uid_mode):
        inner = [k for k in keep if k.startswith(h + "/")]
        fds = [(k, os.open(k, os.O_PATH | os.O_DIRECTORY)) for k in inner]
        _mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for k, fd in fds:
            os.makedirs(k, exist_ok=True)
            _mount("/proc/self/fd/%d" % fd, k, None, MS_BIND | MS_REC)
            os.close(fd)
    if hide_proc:  # a separate proc instance (kernel >= 5.8): other uids' processes are invisible
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    attr = _MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    rc = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr))
    if rc != 0:
        _readonly_fallback()


def _zygote_prepare(feats, cfg):
    """Namespaces shared by all jobs of one zygote (jobs run one at a time): network and the
    read-only mount tree (each job still gets its own mount namespace and a fresh /tmp)."""
    flags = 0
    if "userns" in feats:
        flags |= CLONE_NEWUSER
    if "net" in feats:
        flags |= CLONE_NEWNET
    if "mount" in feats:
        flags |= CLONE_NEWNS
    if not flags:
        return
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(flags), "unshare")
    if "userns" in feats:
        _write_file("/proc/self/setgroups", "deny")
        _write_file("/proc/self/uid_map", "%d %d 1" % (uid, uid))
        _write_file("/proc/self/gid_map", "%d %d 1" % (gid, gid))
    if "mount" in feats:
        _setup_base_mounts(cfg, "uid" in feats, "pid" not in feats and "uid" in feats)


def _readonly_fallback():
    # kernels before 5.12: remount every mount point read-only one by one (keep locked flags)
    with open("/proc/self/mountinfo") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        parts = line.split()
        mp = parts[4].encode().decode("unicode_escape")
        opts = parts[5].split(",")
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID
        flags |= MS_NODEV if "nodev" in opts else 0
        flags |= MS_NOEXEC if "noexec" in opts else 0
        try:
            _mount(None, mp, None, flags)
        except OSError:
            pass


def _drop_caps():
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    hdr = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(hdr), data), "capset")


# ------------------------------------------------------------------ one job

def _frame(nonce, obj):
    data = marshal.dumps(obj)
    return nonce + _FRAME.pack(len(data)) + data


def _job_child(payload_bytes, fds, zsock, feats, cfg, job_uid):
    """Runs in the forked child C. Never returns."""
    res_w = -1
    nonce = b""
    try:
        if zsock is not None:
            zsock.close()
        os.setsid()
        res_w, out_fd, err_fd = fds
        job = marshal.loads(payload_bytes)
        nonce = job["nonce"]
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if "uid" not in feats:
            job_uid = None
        flags = 0
        if "mount" in feats:
            flags |= CLONE_NEWNS
        if "ipc" in feats:
            flags |= CLONE_NEWIPC
        if "pid" in feats:
            flags |= CLONE_NEWPID
        if flags:
            _check(_libc.unshare(flags), "unshare")
        if "mount" in feats:
            _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
            workdir = "/tmp/work"
            os.mkdir(workdir, 0o700)
        else:
            workdir = job["workdir"]
        if job_uid is not None:
            os.chown(workdir, job_uid, job_uid)
        if "pid" in feats:
            g = os.fork()
            if g:
                os.close(res_w)
                os.close(out_fd)
                os.close(err_fd)
                while True:
                    try:
                        _, st = os.waitpid(g, 0)
                        break
                    except InterruptedError:
                        continue
                if os.WIFSIGNALED(st):
                    os._exit(128 + os.WTERMSIG(st))
                os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 70)
            if "mount" in feats:
                _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _runner(job, nonce, res_w, out_fd, err_fd, workdir, feats, job_uid)
    except BaseException as e:
        try:
            if res_w >= 0 and nonce:
                os.write(res_w, _frame(nonce, ("E", "sandbox setup failed: %s: %s" % (type(e).__name__, e))))
        finally:
            os._exit(70)
    os._exit(0)


def _job_streams(res_w, out_fd, err_fd, workdir):
    """The job's file descriptors (stdin /dev/null, stdout and stderr to ``out_fd``/``err_fd``,
    ``res_w`` kept, every other descriptor closed), working directory and a fixed environment."""
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    for fd in (null, out_fd, err_fd):
        if fd > 2 and fd != res_w:
            os.close(fd)
    os.closerange(3, res_w)
    os.closerange(res_w + 1, min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1 << 20))
    os.chdir(workdir)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}
    os.environ.clear()
    os.environ.update(env)
    import tempfile
    tempfile.tempdir = None


def _compile_job(job, describe):
    """Compile the program, the setup and each test (the tests with the strict-equality rewrite when
    ``job["strict"]``) before anything untrusted runs; ``describe`` words a compile error. Returns
    ``(program_code, load_error, setup_code, setup_error, tests, watched)``: ``tests`` a list of
    ``(code, compile_error)``, ``watched`` the module snapshots restored around the setup and each
    test (builtins and every snapshotted module the setup or a test names)."""
    strict = job["strict"]
    load_error = None
    program_code = None
    try:
        program_code = compile(job["program"], "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        load_error = "program does not compile: " + describe(e)
    setup_code = None
    setup_error = None
    names = set()
    if job["setup"].strip():
        try:
            setup_code, found = _compile_test(job["setup"], "<setup>", strict)
            names |= found
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            setup_error = "setup does not compile: " + describe(e)
    tests = []
    for i, src in enumerate(job["tests"]):
        try:
            code, found = _compile_test(src, "<test %d>" % i, strict)
            tests.append((code, None))
            names |= found
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            tests.append((None, "test does not compile: " + describe(e)))
    watched = [("builtins", _MOD_SNAP["builtins"])] + [(n, _MOD_SNAP[n]) for n in sorted(names)
                                                         if n in _MOD_SNAP and n != "builtins"]
    return program_code, load_error, setup_code, setup_error, tests, watched


def _limit_job(job, job_uid, feats, io_inputs):
    """The job's rlimits (CPU seconds, file size, descriptors, no core dumps, no new processes, a
    stack for deep recursion), its unprivileged uid or dropped capabilities, no new privileges, and
    death with its parent. Returns the address-space limit in bytes (set last, by the caller, once
    the harness has allocated what it needs)."""
    cpu = int(job["cpu_s"])
    mem = int(job["memory_mb"]) << 20
    fsize = max(int(job["fsize"]), max([len(x) for x in io_inputs] or [0]) + (1 << 20))
    for res, val in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, fsize),
                     (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, 1)):
        try:
            resource.setrlimit(res, (val, val))
        except (ValueError, OSError):
            soft, hard = resource.getrlimit(res)
            resource.setrlimit(res, (val if hard == resource.RLIM_INFINITY else min(val, hard), hard))
    try:  # deep recursion: let the main thread's stack grow (within the address-space limit)
        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        want = min(256 << 20, mem // 2)
        if hard == resource.RLIM_INFINITY or hard >= want:
            resource.setrlimit(resource.RLIMIT_STACK, (want, hard))
    except (ValueError, OSError):
        pass
    if job_uid is not None:
        os.setgroups([])
        os.setresgid(job_uid, job_uid, job_uid)
        os.setresuid(job_uid, job_uid, job_uid)
    elif "userns" in feats:
        _drop_caps()
    try:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
    except OSError:
        pass
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # again: a uid change clears it
    return mem


def _runner(job, nonce, res_w, out_fd, err_fd, workdir, feats, job_uid):
    """The job's own process: apply limits, drop privileges, run program and tests, report.

    Everything the harness calls once the untrusted program has started is bound to a local name
    of this function first (the program may rebind module attributes and globals, but it cannot
    reach this frame): that is why the part after "untrusted code from here on" stays one function.
    The steps before it are functions of their own (``_job_streams``, ``_compile_job``,
    ``_limit_job``)."""
    _job_streams(res_w, out_fd, err_fd, workdir)

    # ---- everything the harness needs after untrusted code starts, bound now
    _write, _dup, _dup2, _exit, _lseek, _read, _close = os.write, os.dup, os.dup2, os._exit, os.lseek, os.read, os.close
    _memfd = getattr(os, "memfd_create", None)
    _dumps, _pack, _exec = marshal.dumps, _FRAME.pack, exec
    _BE, _ME, _SE = BaseException, MemoryError, SystemExit
    _type, _len, _dict, _min, _str, _int = type, len, dict, min, str, int
    _args_of = BaseException.__dict__["args"].__get__
    _tname = type.__dict__["__name__"].__get__
    _TextIO, _FileIO, _BufR = io.TextIOWrapper, io.FileIO, io.BufferedReader
    _signal, _setitimer, _getsignal = signal.signal, signal.setitimer, signal.getsignal
    _ITIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
    _initial_handlers = []
    for s in range(1, signal.NSIG):
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            _initial_handlers.append((s, _getsignal(s)))
        except (ValueError, OSError):
            pass
    _modules = sys.modules
    _ModuleType = types.ModuleType
    pristine = _PRISTINE_BUILTINS
    io_cap = int(job["io_cap"])

    def send(obj):
        data = _dumps(obj)
        _write(res_w, nonce + _pack(_len(data)) + data)

    def describe(e):
        t = _type(e)
        name = _tname(t)
        try:
            args = _args_of(e)
        except _BE:
            args = ()
        parts = []
        for a in args[:3]:
            ta = _type(a)
            if ta is _str:
                parts.append(a[:400])
            elif ta is _int or ta is float or ta is bool:
                parts.append(repr(a))
        if t is SyntaxError:
            try:
                parts.append("line %d" % e.lineno)
            except _BE:
                pass
        return (name + (": " + ", ".join(parts) if parts else ""))[:600]

    def restore(mods):
        changed = []
        for name, (d, items) in mods:
            for k, v in items:
                if d.get(k, d) is not v:
                    changed.append(name + "." + k)
                    d[k] = v
        return changed

    def reset_signals():
        for it in _ITIMERS:
            _setitimer(it, 0)
        for s, h in _initial_handlers:
            try:
                if _getsignal(s) is not h:
                    _signal(s, h)
            except _BE:
                pass

    def read_memfd(fd, cap):
        size = _lseek(fd, 0, 2)
        _lseek(fd, 0, 0)
        data = _read(fd, _min(size, cap)) if size else b""
        return data, size > cap

    def flush(stream):
        try:
            stream.flush()
        except _BE:
            pass

    # ---- compile the trusted parts now (before the program runs)
    program_code, load_error, setup_code, setup_error, tests, watched = _compile_job(job, describe)
    io_inputs = job["io"]
    run_asserts = bool(tests) or not io_inputs

    # ---- limits and privileges
    mem = _limit_job(job, job_uid, feats, io_inputs)
    random.seed()
    sys.argv = ["solution.py"]
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]
    job_stdout = _TextIO(_FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
    sys.stdout = job_stdout
    sys.stderr = _TextIO(_FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                         line_buffering=True)
    sys.stdin = _TextIO(_BufR(_FileIO(0, "r", closefd=False)), encoding="utf-8", errors="replace")
    job_out_fd = _dup(1) if io_inputs else -1
    protected = _PROTECTED_IDS
    may_setrlimit = os.geteuid() != 0
    hook = _make_hook(workdir, protected, os.getpid(), may_setrlimit)
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    if job["audit"]:
        sys.addaudithook(hook)
    del job  # (unreachable anyway: frames are not available to the program)

    # ================================================================ untrusted code from here on
    memory_hit = False
    io_rows = []
    for i, data in enumerate(io_inputs):
        send(("S", "io", i))
        reset_signals()
        restore(watched)
        if program_code is None:
            io_rows.append((False, load_error, b""))
            continue
        ok, err, out = False, None, b""
        try:
            fin = _memfd("stdin")
            _write(fin, data)
            _lseek(fin, 0, 0)
            _dup2(fin, 0)
            _close(fin)
            fout = _memfd("stdout")
            _dup2(fout, 1)
            case_out = _TextIO(_FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
            sys.stdout = case_out
            sys.stdin = _TextIO(_BufR(_FileIO(0, "r", closefd=False)), encoding="utf-8", errors="replace")
            m = _ModuleType("__main__")
            m.__dict__["__builtins__"] = _B
            _modules["__main__"] = m
            try:
                _exec(program_code, m.__dict__)
                ok = True
            except _SE as e:
                code = e.code
                ok = code is None or code == 0
                if not ok:
                    err = "exit status %s" % (code if _type(code) is _int else 1)
            except _ME:
                memory_hit = True
                err = "MemoryError"
            except _BE as e:
                err = describe(e)
            flush(case_out)
            out, truncated = read_memfd(fout, io_cap)
            if truncated:
                ok, err = False, "output exceeds %d bytes" % io_cap
            _close(fout)
            _dup2(job_out_fd, 1)
            sys.stdout = job_stdout
        except _ME:
            memory_hit = True
            ok, err = False, "MemoryError"
        except _BE as e:
            ok, err = False, "harness: " + describe(e)
        io_rows.append((ok, err, out))
    if not run_asserts:
        flush(job_stdout)
        send(("F", None, [], memory_hit, io_rows))
        _exit(0)

    m = _ModuleType("__solution__")
    g = m.__dict__
    g["__builtins__"] = _B
    _modules["__main__"] = m
    _modules["__solution__"] = m
    if load_error is None:
        send(("S", "load", 0))
        try:
            _exec(program_code, g)
        except _SE as e:
            code = e.code
            if not (code is None or code == 0):
                load_error = "program exited with status %s while loading" % (code if _type(code) is _int else 1)
        except _ME:
            memory_hit = True
            load_error = "MemoryError while loading the program"
        except _BE as e:
            load_error = "program raised while loading: " + describe(e)
    flush(job_stdout)
    if load_error is None and setup_error is None:
        T = _dict(g)
        T["__builtins__"] = _dict(pristine)
        if setup_code is not None:
            reset_signals()
            restore(watched)
            try:
                _exec(setup_code, T)
            except _ME:
                memory_hit = True
                setup_error = "MemoryError in setup"
            except _BE as e:
                setup_error = "setup raised: " + describe(e)
            changed = restore(watched)
            if changed and setup_error is None:
                setup_error = "setup: the program modified %s" % ", ".join(changed[:3])
    first_error = load_error or setup_error
    if first_error is not None:
        flush(job_stdout)
        send(("F", first_error, [(False, first_error, None) for _ in tests], memory_hit, io_rows))
        _exit(0)
    rows = []
    for i, (code, cerr) in enumerate(tests):
        send(("S", "assert", i))
        if code is None:
            rows.append((False, cerr, None))
            continue
        reset_signals()
        restore(watched)
        T["__builtins__"] = _dict(pristine)
        ok, err = False, None
        try:
            _exec(code, T)
            ok = True
        except _ME:
            memory_hit = True
            err = "MemoryError"
        except _BE as e:
            err = describe(e)
        try:
            changed = restore(watched)
            if changed:
                ok = False
                err = "the program modified %s during the test" % ", ".join(changed[:3])
        except _BE as e:
            ok, err = False, "harness: " + describe(e)
        rows.append((ok, err, None))
    flush(job_stdout)
    send(("F", None, rows, memory_hit, io_rows))
    _exit(0)


# ------------------------------------------------------------------ zygote

def _probe_one(feats, cfg):
    """Fork a job with ``feats`` that runs a self-check; True when it reports success."""
    r, w = os.pipe()
    nonce = os.urandom(16)
    out = os.memfd_create("probe") if hasattr(os, "memfd_create") else os.open("/dev/null", os.O_WRONLY)
    err = os.dup(out)
    wd = None
    if "mount" not in feats:
        import tempfile
        wd = tempfile.mkdtemp(prefix="probe-", dir=cfg.get("tmp") or None)
    job = {"nonce": nonce, "program": _PROBE_PROGRAM, "tests": [_PROBE_TEST], "setup": "", "io": [],
           "strict": True, "cpu_s": 5, "memory_mb": 512, "fsize": 1 << 20, "workdir": wd, "io_cap": 1024,
           "audit": True}
    pid = os.fork()
    if pid == 0:  # a throw-away zygote with these features, running one job
        try:
            os.close(r)
            if _ZSOCK[0] is not None:
                _ZSOCK[0].close()
            _zygote_prepare(feats, cfg)
            c = os.fork()
            if c == 0:
                _job_child(marshal.dumps(job), (w, out, err), None, feats, cfg, _pick_uid(cfg))
                os._exit(70)
            os.waitpid(c, 0)
        finally:
            os._exit(0)
    os.close(w)
    os.close(out)
    os.close(err)
    chunks = []
    while True:
        c = os.read(r, 65536)
        if not c:
            break
        chunks.append(c)
    os.close(r)
    os.waitpid(pid, 0)
    if wd:
        import shutil
        shutil.rmtree(wd, ignore_errors=True)
    data = b"".join(chunks)
    fin = None
    pos = 0
    while True:
        i = data.find(nonce, pos)
        if i < 0 or i + 20 > len(data):
            break
        (n,) = _FRAME.unpack_from(data, i + 16)
        try:
            f = marshal.loads(data[i + 20:i + 20 + n])
        except Exception:
            break
        if f[0] == "F":
            fin = f
        pos = i + 20 + n
    return fin is not None and fin[1] is None and len(fin[2]) == 1 and fin[2][0][0] is True


# the self-check: a stdlib module that is not preloaded must import (the Python installation is
# readable), the working directory is writable, and nothing was left behind by the setup
_PROBE_PROGRAM = """
import colorsys, sched
def probe():
    with open("probe.txt", "w") as fh:
        fh.write("ok")
    with open("probe.txt") as fh:
        assert fh.read() == "ok"
    return colorsys.rgb_to_hsv(0, 0, 0) == (0, 0, 0)
"""
_PROBE_TEST = "assert probe() is True"


def _uid_range_ok(lo, hi):
    try:
        with open("/proc/self/uid_map") as fh:
            for line in fh:
                inner, outer, count = (int(x) for x in line.split())
                if inner <= lo and hi <= inner + count:
                    return True
    except (OSError, ValueError):
        return True
    return False


def _pick_uid(cfg):
    if cfg.get("uid_wide"):
        return 2000000000 + int.from_bytes(os.urandom(4), "little") % (1 << 20)
    return 65534


def _probe(cfg):
    """Most isolated feature set that works here: all wanted features first, then greedily.
    A pid namespace is only used when jobs cannot get a uid of their own (as root with a wide
    uid map, RLIMIT_NPROC=1 on a fresh uid already forbids every fork and signal outside)."""
    wanted = set(cfg.get("features") or ())
    root = os.geteuid() == 0
    cfg["uid_wide"] = _uid_range_ok(2000000000, 2000000000 + (1 << 20))
    if cfg.get("probed") is not None:  # another zygote of the same pool already found out
        return sorted(set(cfg["probed"]) & wanted)
    order = ["mount", "uid", "net", "ipc", "pid"] if root else ["userns", "mount", "net", "ipc", "pid"]
    order = [f for f in order if f in wanted]
    if root and cfg["uid_wide"] and "uid" in order and "pid" in order and _kernel_at_least(5, 8):
        if _probe_one(set(order) - {"pid"}, cfg):
            return sorted(set(order) - {"pid"})
    if not order:
        return []
    if _probe_one(set(order), cfg):
        return sorted(order)
    feats = set()
    for f in order:
        if f in ("mount", "net", "pid", "ipc") and not root and "userns" not in feats:
            continue
        if _probe_one(feats | {f}, cfg):
            feats.add(f)
    if root and cfg["uid_wide"] and "uid" in feats and "pid" in feats and _kernel_at_least(5, 8) \
            and "mount" in feats and _probe_one(feats - {"pid"}, cfg):
        feats.discard("pid")
    return sorted(feats)


_ZSOCK = [None]


def _wait_child(sock, pid):
    pidfd = -1
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    killed = False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLHUP)
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    while True:
        rpid, status, ru = os.wait4(pid, os.WNOHANG)
        if rpid == pid:
            break
        events = poller.poll(None if pidfd >= 0 else 5)
        for fd, ev in events:
            if fd == sock.fileno():
                msg, fds = _recv_msg(sock)
                for f in fds:
                    os.close(f)
                if msg is None or msg.get("op") in ("kill", "exit"):
                    if not killed:
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except OSError:
                            pass
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
                        killed = True
                    if msg is None:
                        os.wait4(pid, 0)
                        os._exit(0)
    if pidfd >= 0:
        os.close(pidfd)
    return status, ru.ru_utime + ru.ru_stime, killed


def _zygote_main():
    sock = socket.socket(fileno=int(sys.argv[2]))
    _ZSOCK[0] = sock
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]
    cfg, _ = _recv_msg(sock)
    if cfg is None:
        os._exit(0)
    feats = _probe(cfg)
    _zygote_prepare(feats, cfg)
    gc.freeze()  # the preloaded heap stays shared with every fork (no copy-on-write from the GC)
    _send_msg(sock, {"op": "hello", "pid": os.getpid(), "features": feats, "euid": os.geteuid(),
                     "python": sys.version.split()[0]})
    idle_ms = int(cfg.get("idle_timeout_s", 300) * 1000)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLHUP)
    while True:
        if not poller.poll(idle_ms):
            os._exit(0)
        msg, fds = _recv_msg(sock)
        if msg is None:
            os._exit(0)
        op = msg.get("op")
        if op == "exit":
            os._exit(0)
        if op != "run":
            for f in fds:
                os.close(f)
            continue
        payload = msg["payload"]
        job_uid = _pick_uid(cfg) if "uid" in feats else None
        pid = os.fork()
        if pid == 0:
            _job_child(payload, fds, sock, feats, cfg, job_uid)
            os._exit(70)
        for f in fds:
            os.close(f)
        del payload
        _send_msg(sock, {"op": "started", "pid": pid})
        status, cpu, killed = _wait_child(sock, pid)
        if os.WIFSIGNALED(status):
            code = -os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        _send_msg(sock, {"op": "exit", "code": code, "cpu": cpu, "killed": killed})


_zygote_main()
