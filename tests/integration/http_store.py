#!/usr/bin/env python3
"""http_store.py — an HTTP object store on 127.0.0.1 for the remote tier's
HTTP tests (integration/test_remote_http.sh), honest or not.

    http_store.py MODE PORT_FILE [LIFETIME_S] [TOKEN]

It listens on 127.0.0.1, a free port, written to PORT_FILE once it listens.
MODE:
  store    GET, HEAD, PUT and DELETE of objects kept in memory; with TOKEN,
           every request must carry "Authorization: Bearer TOKEN" (else 401);
           every request line is appended to PORT_FILE.log (the Authorization
           header too, so the test can check what was sent)
  silent   accepts connections, reads the request, never answers
  trickle  answers 200 with a 100 kB body, one byte every 20 ms
  garbage  answers bytes that are not HTTP
It stops by itself after LIFETIME_S seconds (default 60), or as soon as the
process that started it is gone, so a failed test never leaves it behind.
With HTTP_STORE_TLS=CERT:KEY in the environment a store speaks HTTPS with
that certificate (PEM files).
"""
import http.server
import os
import socket
import ssl
import sys
import threading
import time

MODE, PORT_FILE = sys.argv[1], sys.argv[2]
LIFETIME = float(sys.argv[3]) if len(sys.argv) > 3 else 60
TOKEN = sys.argv[4] if len(sys.argv) > 4 else ""
objects = {}
lock = threading.Lock()


class Store(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self):
        with open(PORT_FILE + ".log", "a") as f:
            f.write("%s %s auth=%s\n" % (self.command, self.path, self.headers.get("Authorization", "")))

    def allowed(self):
        self.note()
        if TOKEN and self.headers.get("Authorization", "") != "Bearer " + TOKEN:
            self.reply(401)
            return False
        return True

    def reply(self, code, body=b"", head=False):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_GET(self, head=False):
        if not self.allowed():
            return
        with lock:
            body = objects.get(self.path)
        if body is None:
            self.reply(404, b"", head)
        else:
            self.reply(200, body, head)

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_PUT(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        if not self.allowed():
            return
        with lock:
            objects[self.path] = body
        self.reply(201)

    def do_DELETE(self):
        if not self.allowed():
            return
        with lock:
            found = objects.pop(self.path, None) is not None
        self.reply(204 if found else 404)


def hostile(conn):
    try:
        conn.settimeout(LIFETIME)
        conn.recv(65536)
        if MODE == "trickle":
            body = b"x" * 100000
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
            for i in range(len(body)):
                conn.sendall(body[i:i + 1])
                time.sleep(0.02)
        elif MODE == "garbage":
            conn.sendall(b"+OK\r\n$5\r\nhello\r\n:1\r\n" * 4)
            time.sleep(0.5)
        else:  # silent
            time.sleep(LIFETIME)
    except OSError:
        pass
    finally:
        conn.close()


def watchdog(parent):
    start = time.time()
    while time.time() - start < LIFETIME and os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)


def main():
    threading.Thread(target=watchdog, args=(os.getppid(),), daemon=True).start()
    if MODE == "store":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
        port = server.server_address[1]
        tls = os.environ.get("HTTP_STORE_TLS")
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls.split(":", 1))
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
    else:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        port = server.getsockname()[1]
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write("%d\n" % port)
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    if MODE == "store":
        server.serve_forever()
    while True:
        conn, _ = server.accept()
        threading.Thread(target=hostile, args=(conn,), daemon=True).start()


main()
