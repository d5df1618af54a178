#!/usr/bin/env python3
"""A webhook receiver for the integration tests that verifies Standard Webhooks signatures with
the reference library from PyPI (``standardwebhooks``), not qtg's code.

    webhook_receiver.py --out FILE [--secret NAME=whsec_... ...]

* Binds 127.0.0.1 on a free port, prints exactly one line ``LISTENING <port>`` to stdout.
* For every POST appends one JSON line to FILE (flushed):
    path, headers ({lower-case name: value}), body (text),
    verified_by   the NAMEs of the secrets whose ``Webhook(secret).verify(body, headers)``
                  passed (empty when none did or the headers are not Standard Webhooks)
    errors        {NAME: the library's error} for those that did not
* Answers 500 when the path contains ``/fail``, 200 otherwise.
* Exits on SIGTERM/SIGINT, or when its parent goes away.
"""
import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--secret", action="append", default=[])
    args = ap.parse_args()
    secrets = dict(s.split("=", 1) for s in args.secret)
    lock = threading.Lock()
    out = open(args.out, "a", encoding="utf-8")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            verified, errors = [], {}
            for name, secret in secrets.items():
                try:
                    Webhook(secret).verify(body, headers, json_parse=False)
                    verified.append(name)
                except Exception as e:  # the library's own verdict, recorded as said
                    errors[name] = f"{type(e).__name__}: {e}"
            line = {
                "path": self.path,
                "headers": headers,
                "body": body.decode("utf-8", "replace"),
                "verified_by": verified,
                "errors": errors,
            }
            with lock:
                out.write(json.dumps(line) + "\n")
                out.flush()
            self.send_response(500 if "/fail" in self.path else 200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *a) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"LISTENING {server.server_address[1]}", flush=True)

    def stop(*_a) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    parent = os.getppid()

    def watch_parent() -> None:
        import time
        while True:
            time.sleep(1)
            if os.getppid() != parent:
                stop()
                return

    threading.Thread(target=watch_parent, daemon=True).start()
    server.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
