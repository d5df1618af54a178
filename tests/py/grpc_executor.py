#!/usr/bin/env python3
"""A qtg executor written in another language, from proto/ and docs/executors.md alone.

    PY_EXECUTOR_KEY_STORE=keys.jsonl grpc_executor.py --proto-dir proto --out DIR --secret-env VAR

* Generates the Python stubs of PROTO_DIR/qtg/executor/v1/executor.proto into DIR with
  grpcio-tools (at run time, as an implementer would), then serves
  ``qtg.executor.v1.ExecutorService`` on 127.0.0.1 (a free port), prints exactly one line
  ``LISTENING <port>`` to stdout and flushes.
* Every call must carry qtg's v4 signature (§5): hex HMAC-SHA256(secret,
  ``{timestamp}\\n{nonce}\\n{target}\\n{hex sha256(body)}``) where the target is the gRPC
  method that received the call (``qtg.executor.v1.ExecutorService/Submit``) and the body is
  the RFC 8785 canonical JSON (the ``rfc8785`` package) of the request's proto3 JSON form
  (``MessageToDict``). Missing headers, a version other than v4, a timestamp more than 300 s
  off, a signature that does not match (one signed for another operation included) and a
  nonce already accepted within the window are refused with UNAUTHENTICATED.
* ``PY_EXECUTOR_SIGNATURE=v3`` (default ``v4``) makes it an executor built on the previous
  release (``--proto-dir proto-released``): it verifies the v3 signature instead — the same
  headers and checks, the message without the target line (``{timestamp}\\n{nonce}\\n{hex
  sha256(body)}``) — and, as such an executor did, refuses every other version, v4 included.
* The fence (§2a) over a durable key store: the JSON-lines file named by
  ``PY_EXECUTOR_KEY_STORE`` (required; the executor refuses to start without it). Each change
  is one line ``{"attempt", "key", "node", "state": "sent"|"void", "submit_by"}``, appended and
  fsynced before the answer, and the file is replayed at start. Submit decides, in the
  guide's order: the key's shape and its agreement with the context (else INVALID_ARGUMENT) →
  a key recorded sent keeps its outcome → a void key is refused (IDEMPOTENCY_KEY_VOID) → a
  key never recorded is refused and recorded void when a newer attempt of its node is
  recorded (IDEMPOTENCY_KEY_SUPERSEDED) or it arrives after ``submitBy`` (SUBMIT_BY_PASSED) →
  otherwise it is recorded sent, then executed. Recover: a key never recorded is voided and
  answered FAILED (IDEMPOTENCY_KEY_UNKNOWN), a void key FAILED (IDEMPOTENCY_KEY_VOID), a sent
  key with its order's state.
* The "venue" is an in-memory ledger keyed by client order id (the idempotency key): placing
  an order with a known id answers the existing order (``py-<key>``), never a second one. It
  has no deadline of its own and forgets everything on a restart, so the absence of a sent key
  is never conclusive: Recover answers UNKNOWN with ``__manual_review_required`` then.
* Preflight refuses (FAILED) an amount that is not a positive decimal string; Prepare returns
  a JSON payload with ``payloadHash`` = sha256(payload); Observe answers OBSERVING once, then
  COMPLETED.
* Logs one JSON line per verified call to stderr (``{"verified": "<method>"}``), and one per
  venue call and per fence refusal; exits on SIGTERM or when stdin closes (its parent test
  went away).
"""

from __future__ import annotations

import argparse
import decimal
import hashlib
import hmac
import importlib.resources
import json
import os
import re
import signal
import sys
import threading
import time
from concurrent import futures

KEY_STORE_ENV = "PY_EXECUTOR_KEY_STORE"
SIGNATURE_ENV = "PY_EXECUTOR_SIGNATURE"
SERVICE = "qtg.executor.v1.ExecutorService"
# §5: a timestamp more than this far from our clock is refused, and a nonce is remembered as
# long as a request carrying it could still pass that check.
AUTH_WINDOW_SECONDS = 300
MAX_NONCES = 100_000
# The stand-in venue settles an order on this Observe.
OBSERVE_POLLS = 2
KEY_SHAPE = re.compile(r"(.+):([1-9][0-9]{0,9})")


def log(**fields) -> None:
    print(json.dumps(fields), file=sys.stderr, flush=True)


def signed_message(version: str, ts: str, nonce: str, target: str, body: bytes) -> bytes:
    """The message a signature of ``version`` covers (§5): v4 names the operation called, v3
    (what the previous release's executors verify) does not."""
    lines = [ts, nonce, target] if version == "v4" else [ts, nonce]
    return "\n".join([*lines, hashlib.sha256(body).hexdigest()]).encode()


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


class KeyStore:
    """The fence's durable record of idempotency keys (§2a, §5b step 3), for one replica.

    One JSON line per change, appended and fsynced before the caller answers; replayed at
    start. A key is ``sent`` (recorded before the venue call: the venue may have it) or
    ``void`` (can never execute). Per node it knows the newest attempt recorded. Each method
    decides and records under one lock, so a decision and its record are atomic.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.keys: dict[str, dict] = {}
        self.newest: dict[str, int] = {}
        self.lock = threading.Lock()
        existed = os.path.exists(path)
        if existed:
            self._replay()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if not existed:
            # The new file's directory entry must survive a crash too.
            dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def _replay(self) -> None:
        with open(self.path, "rb") as f:
            data = f.read()
        complete = 0
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            if not line.endswith(b"\n"):
                # A write cut short by a crash: its fsync never returned, so its call was never
                # answered and no venue call followed it. Drop it.
                log(key_store="dropped a torn last line", path=self.path, line=number)
                os.truncate(self.path, complete)
                break
            complete += len(line)
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                if entry["state"] not in ("sent", "void") or not isinstance(entry["attempt"], int):
                    raise ValueError(f"bad entry {entry!r}")
                self._apply(entry)
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{self.path} line {number}: {e}") from e

    def _apply(self, entry: dict) -> None:
        node, attempt = entry["node"], entry["attempt"]
        self.newest[node] = max(self.newest.get(node, attempt), attempt)
        old = self.keys.get(entry["key"])
        if entry.get("submit_by") is None and old is not None:
            # Voiding a sent key keeps the deadline it was sent with.
            entry = {**entry, "submit_by": old.get("submit_by")}
        self.keys[entry["key"]] = entry

    def _record(self, node: str, attempt: int, key: str, state: str, submit_by: str | None = None) -> None:
        entry = {"key": key, "node": node, "attempt": attempt, "state": state, "submit_by": submit_by}
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        while line:
            line = line[os.write(self.fd, line):]
        os.fsync(self.fd)
        self._apply(entry)

    def admit(self, node: str, attempt: int, key: str, submit_by_ns: int, submit_by: str, now_ns: int) -> str:
        """Decides a Submit (§2a rules 2–5): ``repeat``, ``void``, ``superseded``, ``late`` or
        ``first``. A key never recorded is recorded before this returns: void for a refusal,
        sent otherwise."""
        with self.lock:
            known = self.keys.get(key)
            if known is not None:
                return "repeat" if known["state"] == "sent" else "void"
            if self.newest.get(node, 0) > attempt:
                self._record(node, attempt, key, "void")
                return "superseded"
            if now_ns > submit_by_ns:
                self._record(node, attempt, key, "void")
                return "late"
            self._record(node, attempt, key, "sent", submit_by)
            return "first"

    def recover(self, node: str, attempt: int, key: str) -> str:
        """What a Recover of the key finds (§2a rule 7): ``sent``, ``void``, or ``unknown`` —
        a key never recorded, voided before this returns."""
        with self.lock:
            known = self.keys.get(key)
            if known is not None:
                return known["state"]
            self._record(node, attempt, key, "void")
            return "unknown"


class Venue:
    """The stand-in venue: orders by client order id, in memory."""

    def __init__(self) -> None:
        self.orders: dict[str, dict] = {}
        self.lock = threading.Lock()

    def place(self, client_id: str) -> tuple[dict, bool]:
        """The order for ``client_id``, and whether it was placed now (an id seen before
        answers its existing order: never a second effect)."""
        with self.lock:
            order = self.orders.get(client_id)
            if order is not None:
                return dict(order), False
            order = self.orders[client_id] = {"ref": f"py-{client_id}", "polls": 0}
            return dict(order), True

    def find(self, client_id: str) -> dict | None:
        with self.lock:
            order = self.orders.get(client_id)
            return None if order is None else dict(order)

    def poll(self, client_id: str) -> dict | None:
        with self.lock:
            order = self.orders.get(client_id)
            if order is None:
                return None
            order["polls"] += 1
            return dict(order)

    def __len__(self) -> int:
        with self.lock:
            return len(self.orders)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--secret-env", required=True)
    args = ap.parse_args()
    secret = os.environ[args.secret_env].encode()
    signature = os.environ.get(SIGNATURE_ENV, "v4")
    if signature not in ("v4", "v3"):
        raise SystemExit(f"{SIGNATURE_ENV} must be v4 or v3, not {signature!r}")
    store_path = os.environ.get(KEY_STORE_ENV, "")
    if not store_path:
        # §2a rule 5: an in-memory store is not a fence.
        raise SystemExit(f"{KEY_STORE_ENV} must name the fence's key-store file (JSON lines); refusing to start")
    store = KeyStore(store_path)
    venue = Venue()
    generate_stubs(args.proto_dir, args.out)

    import grpc
    import rfc8785
    from google.protobuf import json_format
    from qtg.executor.v1 import executor_pb2 as pb
    from qtg.executor.v1 import executor_pb2_grpc as rpc

    seen_nonces: dict[str, int] = {}
    nonce_lock = threading.Lock()

    def verify(request, context, method: str) -> None:
        md = dict(context.invocation_metadata())
        try:
            version = md["x-qtg-callback-signature-version"]
            ts = md["x-qtg-callback-timestamp"]
            nonce = md["x-qtg-callback-nonce"]
            given = md["x-qtg-callback-signature"]
        except KeyError as missing:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"missing {missing}")
        if version != signature:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"signature version {version}")
        try:
            timestamp = int(ts)
        except ValueError:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "timestamp is not unix seconds")
        if abs(time.time() - timestamp) > AUTH_WINDOW_SECONDS:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "stale timestamp")
        body = rfc8785.dumps(json_format.MessageToDict(request))
        # The target is the method that received the call, never anything in the request: a
        # request signed (v4) for another operation does not verify here.
        message = signed_message(signature, ts, nonce, f"{SERVICE}/{method}", body)
        expected = hmac.new(secret, message, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode(), given.lower().encode()):
            log(refused=method, body=body.decode())
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "signature does not match")
        # Only a verified nonce is recorded, so unsigned requests cannot fill the record.
        with nonce_lock:
            if nonce in seen_nonces:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "replayed nonce")
            if len(seen_nonces) >= MAX_NONCES:
                now = time.time()
                for n, t in list(seen_nonces.items()):
                    if now - t > AUTH_WINDOW_SECONDS:
                        del seen_nonces[n]
                if len(seen_nonces) >= MAX_NONCES:
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "nonce record full")
            seen_nonces[nonce] = timestamp
        log(verified=method, body_bytes=len(body))

    def parse_key(key: str, ctx, context) -> tuple[str, int]:
        """§2a rule 1: ``{request_node_id}:{attempt_no}``, naming the context's node and
        attempt; anything else is an invalid request, never a FAILED answer."""
        shape = KEY_SHAPE.fullmatch(key)
        if shape is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"idempotency_key {key!r} is not {{request_node_id}}:{{attempt_no}}")
        node, attempt = shape.group(1), int(shape.group(2))
        if node != ctx.request_node_id or attempt != ctx.attempt_no:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"idempotency_key {key!r} names another node or attempt than the context "
                          f"({ctx.request_node_id}:{ctx.attempt_no})")
        return node, attempt

    def store_unavailable(context, e: OSError) -> None:
        # Nothing was sent: the record comes before any venue call. qtg reads UNAVAILABLE on
        # Submit as UNKNOWN, and Recover will find the key unrecorded.
        log(key_store="write failed", error=str(e))
        context.abort(grpc.StatusCode.UNAVAILABLE, f"key store: {e}")

    def failed(code: str, detail: str):
        return pb.ExecutionResult(next_state=pb.FAILED, error_code=code, error_detail=detail)

    def order_result(order: dict):
        done = order["polls"] >= OBSERVE_POLLS
        r = pb.ExecutionResult(
            next_state=pb.COMPLETED if done else pb.SUBMITTED,
            provider_state="SETTLED" if done else "ACCEPTED",
            provider_ref_id=order["ref"],
        )
        r.provider_refs.update({"py_order_id": order["ref"]})
        return r

    class Executor(rpc.ExecutorServiceServicer):
        def Preflight(self, request, context):
            verify(request, context, "Preflight")
            amount = json_format.MessageToDict(request.context.intent).get("amount")
            try:
                positive = isinstance(amount, str) and decimal.Decimal(amount).is_finite() and decimal.Decimal(amount) > 0
            except decimal.InvalidOperation:
                positive = False
            if not positive:
                return failed("PY_AMOUNT_NOT_POSITIVE", f"amount {amount!r} is not a positive decimal string")
            return pb.ExecutionResult()

        def Prepare(self, request, context):
            verify(request, context, "Prepare")
            config = json_format.MessageToDict(request.context.node_config)
            payload = json.dumps({"config": config}, sort_keys=True)
            return pb.PrepareResponse(action=pb.PreparedAction(
                action_type=request.context.action_type, payload_format="json", payload=payload,
                payload_hash=hashlib.sha256(payload.encode()).hexdigest()))

        def Submit(self, request, context):
            verify(request, context, "Submit")
            key = request.idempotency_key
            node, attempt = parse_key(key, request.context, context)
            if not request.HasField("submit_by"):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "submit_by is required")
            try:
                decision = store.admit(node, attempt, key, request.submit_by.ToNanoseconds(),
                                       request.submit_by.ToJsonString(), time.time_ns())
            except OSError as e:
                store_unavailable(context, e)
            if decision != "first" and decision != "repeat":
                log(fence=decision, method="Submit", key=key)
            if decision == "void":
                return failed("IDEMPOTENCY_KEY_VOID", "the key is void; nothing was sent")
            if decision == "superseded":
                return failed("IDEMPOTENCY_KEY_SUPERSEDED",
                              "a newer attempt of this node was already seen; nothing was sent, the key is void")
            if decision == "late":
                return failed("SUBMIT_BY_PASSED",
                              f"received after submit_by {request.submit_by.ToJsonString()}; "
                              "nothing was sent, the key is void")
            # Recorded as sent (now, or before: a repeat keeps its outcome whatever submit_by or
            # newer attempts say). The key is the venue's client order id, so a repeat answers
            # the original order. This venue has no deadline to send submit_by to (§2a rule 6).
            order, executed = venue.place(key)
            log(submit=key, executed=executed)
            return order_result(order)

        def Observe(self, request, context):
            verify(request, context, "Observe")
            ctx = request.context
            order = venue.poll(f"{ctx.request_node_id}:{ctx.attempt_no}")
            if order is None:
                return pb.ExecutionResult(next_state=pb.UNKNOWN, error_code="PY_ORDER_NOT_FOUND",
                                          error_detail="the venue has no order for this attempt")
            r = order_result(order)
            if r.next_state != pb.COMPLETED:
                r.next_state = pb.OBSERVING
                r.provider_state = "PROCESSING"
                r.retry_after_seconds = 0.2
            return r

        def Recover(self, request, context):
            verify(request, context, "Recover")
            key = request.idempotency_key
            node, attempt = parse_key(key, request.context, context)
            try:
                state = store.recover(node, attempt, key)
            except OSError as e:
                store_unavailable(context, e)
            if state == "unknown":
                log(fence="unknown", method="Recover", key=key)
                return failed("IDEMPOTENCY_KEY_UNKNOWN", "this executor never sent the key; it is now void")
            if state == "void":
                return failed("IDEMPOTENCY_KEY_VOID", "the key is void; nothing was executed")
            order = venue.find(key)
            if order is not None:
                return order_result(order)
            # Sent, and no order: this venue has neither a deadline nor a sequence, so its
            # absence is never conclusive — a person decides.
            r = pb.ExecutionResult(next_state=pb.UNKNOWN, error_code="PY_ORDER_NOT_FOUND",
                                   error_detail="the key was sent but the venue has no order for it")
            r.provider_refs.update({"__manual_review_required": "sent_key_without_order"})
            return r

        def Health(self, request, context):
            verify(request, context, "Health")
            r = pb.HealthResponse(ok=True)
            r.details.update({"orders": len(venue)})
            return r

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
