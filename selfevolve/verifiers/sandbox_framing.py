"""The one message format between the sandbox's parent and its child program: a marshal-encoded
object behind a 4-byte little-endian length, over a Unix stream socket, optionally carrying file
descriptors (SCM_RIGHTS) with the length prefix.

Standard library only, no package imports and no annotations that need one: the parent
(``sandbox_zygote``) imports this module, and the child program (``sandbox_child.py``) runs in a bare
interpreter that cannot import the package, so the parent prepends this file's source to the
child's (``sandbox_zygote._HARNESS_SOURCE``).
"""

import marshal
import socket
import struct

_FRAME = struct.Struct("<I")


def _send_msg(sock, obj, fds=()):
    """Send ``obj`` (marshal-able) as one frame; ``fds`` travel with its length prefix."""
    data = marshal.dumps(obj)
    head = _FRAME.pack(len(data))
    if fds:
        sent = socket.send_fds(sock, [head], list(fds))
        if sent < len(head):
            sock.sendall(head[sent:])
        sock.sendall(data)
    else:
        sock.sendall(head + data)


def _recv_msg(sock):
    """Receive one frame: ``(obj, fds)``; ``obj`` is ``None`` when the peer closed the socket
    (``fds`` are whatever descriptors arrived, at most 16)."""
    first, fds, _flags, _addr = socket.recv_fds(sock, _FRAME.size, 16)
    if not first:
        return None, []
    head = bytearray(first)
    while len(head) < _FRAME.size:
        c = sock.recv(_FRAME.size - len(head))
        if not c:
            return None, fds
        head += c
    (n,) = _FRAME.unpack(bytes(head))
    buf = bytearray()
    while len(buf) < n:
        c = sock.recv(min(1 << 20, n - len(buf)))
        if not c:
            return None, fds
        buf += c
    return marshal.loads(bytes(buf)), fds
