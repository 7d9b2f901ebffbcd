"""An https endpoint on 127.0.0.1 for the tests of QUEEN_S3_CA_FILE and
`queen lake --ca-file`: a certificate authority made for the test (the
openssl command line), a server certificate it signs for 127.0.0.1, and a
TLS front that either forwards every connection, once its handshake is
done, to a plain port (the test bucket) or holds it silent after the
handshake (a hung bucket)."""

import os
import socket
import ssl
import subprocess
import threading


def make_ca(workdir):
    """Write ca.pem, server.pem and server.key under workdir; returns
    their paths (ca, cert, key)."""
    os.makedirs(workdir, exist_ok=True)
    p = lambda name: os.path.join(workdir, name)  # noqa: E731

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True,
                       timeout=60)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
        p("ca.key"), "-out", p("ca.pem"), "-days", "2", "-subj",
        "/CN=queen test authority")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", p("server.key"),
        "-out", p("server.csr"), "-subj", "/CN=127.0.0.1")
    with open(p("ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"),
        "-CAkey", p("ca.key"), "-CAcreateserial", "-out", p("server.pem"),
        "-days", "2", "-extfile", p("ext.cnf"))
    return p("ca.pem"), p("server.pem"), p("server.key")


def pipe(src, dst):
    """Copy src to dst until src ends (or either fails), then end dst's
    writing side."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Listener:
    """A port on 127.0.0.1 that accepts every connection and hands it to
    on_connection, which here holds it: never a byte sent, never closed (a
    port that is no HTTP server, or a hung one)."""

    scheme = "http"

    def __enter__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.url = "%s://127.0.0.1:%d" % (self.scheme, self.port)
        self.held = getattr(self, "held", [])
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()
        return self

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # the listener closed: the test is over
                return
            self.on_connection(conn)

    def on_connection(self, conn):
        self.held.append(conn)

    def __exit__(self, *exc):
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(timeout=10)
        for c in self.held:
            try:
                c.close()
            except OSError:
                pass


class TlsFront(Listener):
    """A TLS listener on 127.0.0.1 with cert/key; to_port: forward each
    connection there after its handshake, None: hold it silent."""

    scheme = "https"

    def __init__(self, cert, key, to_port=None):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.to_port = to_port
        self.handshakes = 0
        self.held = []

    def on_connection(self, conn):
        threading.Thread(target=self._serve, args=(conn,),
                         daemon=True).start()

    def _serve(self, conn):
        try:
            tls = self.ctx.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()  # a client that refused the certificate
            return
        self.handshakes += 1
        self.held.append(tls)
        if self.to_port is None:
            return  # silent: never a byte back, never closed
        origin = socket.create_connection(("127.0.0.1", self.to_port))
        self.held.append(origin)
        threading.Thread(target=pipe, args=(origin, tls),
                         daemon=True).start()
        pipe(tls, origin)
