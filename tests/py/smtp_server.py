#!/usr/bin/env python3
"""A real SMTP server for the integration tests (aiosmtpd from PyPI), requiring STARTTLS and
AUTH as a mail relay does.

    smtp_server.py --out FILE --user USER --password PASSWORD --ca-out CA_PEM

* Makes a test CA and a server certificate it signs (openssl, EC P-256; SAN localhost and
  127.0.0.1), writes the CA's PEM to CA_PEM for the client to trust.
* Listens on 127.0.0.1 (a free port) with STARTTLS required and AUTH (PLAIN / LOGIN) required
  after it; prints exactly one line ``LISTENING <port>``.
* For every message appends one JSON line to FILE (flushed): mail_from, rcpt_tos, data (the
  message as text), tls (STARTTLS was used), auth_user (who authenticated).
* Exits on SIGTERM/SIGINT or when its parent goes away.
"""
import argparse
import json
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def make_certs(directory: str):
    def run(*args):
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    ca_key, ca_pem = os.path.join(directory, "ca.key"), os.path.join(directory, "ca.pem")
    key, csr, pem = (os.path.join(directory, n) for n in ("server.key", "server.csr", "server.pem"))
    ext = os.path.join(directory, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_pem, "-days", "2",
        "-subj", "/CN=qtg test mail CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial",
        "-out", pem, "-days", "2", "-extfile", ext)
    return ca_pem, pem, key


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--ca-out", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="qtg-smtp-")
    ca_pem, cert, key = make_certs(work)
    with open(ca_pem) as src, open(args.ca_out, "w") as dst:
        dst.write(src.read())
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    lock = threading.Lock()
    out = open(args.out, "a", encoding="utf-8")

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            auth = session.auth_data
            user = auth.login.decode() if session.authenticated and isinstance(auth, LoginPassword) else None
            line = {
                "mail_from": envelope.mail_from,
                "rcpt_tos": envelope.rcpt_tos,
                "data": envelope.content.decode("utf-8", "replace"),
                "tls": session.ssl is not None,
                "auth_user": user,
            }
            with lock:
                out.write(json.dumps(line) + "\n")
                out.flush()
            return "250 Message accepted for delivery"

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = (isinstance(auth_data, LoginPassword) and auth_data.login == args.user.encode()
              and auth_data.password == args.password.encode())
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port, tls_context=context,
                            require_starttls=True, authenticator=authenticator, auth_required=True,
                            auth_require_tls=True)
    controller.start()
    print(f"LISTENING {port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()
    while not stop.is_set() and os.getppid() == parent:
        time.sleep(0.5)
    controller.stop()


if __name__ == "__main__":
    main()
