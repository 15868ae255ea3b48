#!/usr/bin/env python3
"""fake_redis.py — a hostile or broken "Redis server" on a unix socket, for
the remote tier's deadline tests (integration/test_remote_deadline.sh).

    fake_redis.py MODE SOCKET [LIFETIME_S]

Every connection is answered, whatever the command, as MODE says:
  silent   reads the command and never answers
  trickle  answers a 100 kB bulk string one byte every 20 ms (each byte well
           within any timeout; the whole reply takes half an hour)
  huge     announces a 60 MiB bulk string and sends it in 64 KiB pieces every
           5 ms (about 13 MB/s: never a pause, ~5 s in all)
  garbage  answers bytes that are not the Redis protocol (an HTTP error)
  die      answers half of a bulk string, then closes the connection
It stops by itself after LIFETIME_S seconds (default 60), or as soon as the
process that started it is gone, so a failed test never leaves it behind.
"""
import os
import socket
import sys
import threading
import time


def answer(conn, mode):
    if mode == "trickle":
        body = b"$100000\r\n" + b"x" * 100000 + b"\r\n"
        for i in range(len(body)):
            conn.sendall(body[i:i + 1])
            time.sleep(0.02)
    elif mode == "huge":
        n = 60 << 20
        conn.sendall(b"$%d\r\n" % n)
        piece = b"y" * 65536
        for _ in range(n // len(piece)):
            conn.sendall(piece)
            time.sleep(0.005)
        conn.sendall(b"\r\n")
    elif mode == "garbage":
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    elif mode == "die":
        conn.sendall(b"$1000\r\n" + b"z" * 500)
        raise ConnectionAbortedError
    # silent: nothing


def serve(conn, mode):
    try:
        while conn.recv(65536):
            answer(conn, mode)
    except OSError:
        pass
    finally:
        conn.close()


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("silent", "trickle", "huge", "garbage", "die"):
        sys.exit(__doc__)
    mode, path = sys.argv[1], sys.argv[2]
    lifetime = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
    parent = os.getppid()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(16)
    s.settimeout(0.2)
    end = time.monotonic() + lifetime
    while time.monotonic() < end and os.getppid() == parent:
        try:
            conn, _ = s.accept()
        except socket.timeout:
            continue
        conn.settimeout(None)
        threading.Thread(target=serve, args=(conn, mode), daemon=True).start()
    os._exit(0)  # daemon threads may be mid-reply: stop them too


if __name__ == "__main__":
    main()
