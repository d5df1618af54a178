#!/usr/bin/env python3
"""A qtg executor written in another language, from proto/ and docs/executors.md alone.

    grpc_executor.py --proto-dir proto --out DIR --secret-env VAR

* Generates the Python stubs of proto/qtg/executor/v1/executor.proto into DIR with
  grpcio-tools (at run time, as an implementer would), then serves
  ``qtg.executor.v1.ExecutorService`` on 127.0.0.1 (a free port), prints exactly one line
  ``LISTENING <port>`` to stdout and flushes.
* Every call must carry qtg's v4 signature: hex HMAC-SHA256(secret,
  ``{timestamp}\\n{nonce}\\n{target}\\n{hex sha256(body)}``) where the target is the gRPC
  method (``qtg.executor.v1.ExecutorService/Submit``) and the body is the RFC 8785 canonical
  JSON (the ``rfc8785`` package) of the request's proto3 JSON form (``MessageToDict``). A call
  with a bad or replayed signature is refused with UNAUTHENTICATED.
* Preflight passes, Prepare returns a JSON payload, Submit records the idempotency key and
  answers SUBMITTED with ``py-<key>`` (the same key answers the same order), Observe answers
  COMPLETED, Recover finds the order by key (FAILED when there is none).
* Logs one JSON line per verified call to stderr (``{"verified": "<method>"}``); exits on
  SIGTERM or when stdin closes (its parent test went away).
"""

import argparse
import hashlib
import hmac
import importlib.resources
import json
import os
import signal
import sys
import threading
import time
from concurrent import futures


def generate_stubs(proto_dir: str, out: str) -> None:
    from grpc_tools import protoc

    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    code = protoc.main([
        "protoc",
        f"-I{proto_dir}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        os.path.join(proto_dir, "qtg/executor/v1/executor.proto"),
    ])
    if code != 0:
        raise SystemExit(f"protoc failed: {code}")
    sys.path.insert(0, out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--secret-env", required=True)
    args = ap.parse_args()
    secret = os.environ[args.secret_env].encode()
    generate_stubs(args.proto_dir, args.out)

    import grpc
    import rfc8785
    from google.protobuf import json_format
    from qtg.executor.v1 import executor_pb2 as pb
    from qtg.executor.v1 import executor_pb2_grpc as rpc

    service = "qtg.executor.v1.ExecutorService"
    seen_nonces: dict[str, int] = {}
    lock = threading.Lock()
    ledger: dict[str, str] = {}

    def log(**fields) -> None:
        print(json.dumps(fields), file=sys.stderr, flush=True)

    def verify(request, context, method: str) -> None:
        md = dict(context.invocation_metadata())
        try:
            version = md["x-qtg-callback-signature-version"]
            ts = md["x-qtg-callback-timestamp"]
            nonce = md["x-qtg-callback-nonce"]
            given = md["x-qtg-callback-signature"]
        except KeyError as missing:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"missing {missing}")
        if version != "v4":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"signature version {version}")
        if abs(time.time() - int(ts)) > 300:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "stale timestamp")
        body = rfc8785.dumps(json_format.MessageToDict(request))
        target = f"{service}/{method}"
        message = f"{ts}\n{nonce}\n{target}\n{hashlib.sha256(body).hexdigest()}".encode()
        expected = hmac.new(secret, message, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, given):
            log(refused=method, body=body.decode())
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "signature does not match")
        with lock:
            if nonce in seen_nonces:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "replayed nonce")
            seen_nonces[nonce] = int(ts)
        log(verified=method, body_bytes=len(body))

    class Executor(rpc.ExecutorServiceServicer):
        def Preflight(self, request, context):
            verify(request, context, "Preflight")
            return pb.ExecutionResult()

        def Prepare(self, request, context):
            verify(request, context, "Prepare")
            config = json_format.MessageToDict(request.context.node_config)
            payload = json.dumps({"config": config}, sort_keys=True)
            return pb.PrepareResponse(action=pb.PreparedAction(
                action_type=request.context.action_type, payload_format="json", payload=payload))

        def Submit(self, request, context):
            verify(request, context, "Submit")
            with lock:
                ref = ledger.setdefault(request.idempotency_key, f"py-{request.idempotency_key}")
            return pb.ExecutionResult(next_state=pb.SUBMITTED, provider_ref_id=ref)

        def Observe(self, request, context):
            verify(request, context, "Observe")
            return pb.ExecutionResult(next_state=pb.COMPLETED, provider_ref_id=request.context.provider_ref_id)

        def Recover(self, request, context):
            verify(request, context, "Recover")
            with lock:
                ref = ledger.get(request.idempotency_key)
            if ref is None:
                return pb.ExecutionResult(next_state=pb.FAILED, error_code="NOT_FOUND")
            return pb.ExecutionResult(next_state=pb.SUBMITTED, provider_ref_id=ref)

        def Health(self, request, context):
            verify(request, context, "Health")
            return pb.HealthResponse(ok=True)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_ExecutorServiceServicer_to_server(Executor(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"LISTENING {port}", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    stop.wait()
    server.stop(grace=1)


if __name__ == "__main__":
    main()
