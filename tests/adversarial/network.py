"""Network: TCP connect + send to a listener on 127.0.0.1, UDP sendto, _socket directly, urllib,
an AF_UNIX socketpair, DNS."""
import socket

try:
    s = socket.create_connection(("127.0.0.1", __PORT__), timeout=2)
    s.sendall(b"pwned-tcp")
    s.close()
    print("ESCAPED: tcp")
except Exception:
    pass
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"pwned-udp", ("127.0.0.1", __PORT__))
    print("ESCAPED: udp")
except Exception:
    pass
try:
    import _socket
    r = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    r.settimeout(2)
    r.connect(("127.0.0.1", __PORT__))
    r.send(b"pwned-raw")
    print("ESCAPED: _socket")
except Exception:
    pass
try:
    import urllib.request
    urllib.request.urlopen("http://127.0.0.1:__PORT__/pwned", timeout=2)
    print("ESCAPED: urllib")
except Exception:
    pass
try:
    socket.getaddrinfo("example.com", 80)
    print("ESCAPED: dns")
except Exception:
    pass


def solve():
    return 0
