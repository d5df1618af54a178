#!/usr/bin/env python3
"""A real OTLP/gRPC trace receiver for the integration tests.

Implements ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` with grpcio and the
generated stubs from the ``opentelemetry-proto`` package (run it with the python printed by
scripts/ensure-test-venv.sh).

    otlp_receiver.py --port 0 --out FILE

* Binds 127.0.0.1:<port> (0 = a free port picked by the OS), then prints exactly one line
  ``LISTENING <port>`` to stdout and flushes. Nothing else goes to stdout.
* For each received span appends one JSON line to FILE (flushed after every line):
    trace_id, span_id          lowercase hex
    parent_span_id             lowercase hex, or "" for a root span
    name                       span name
    kind                       SpanKind as its integer value (0 unspecified, 1 internal,
                               2 server, 3 client, 4 producer, 5 consumer)
    kind_name                  the same as its enum name, e.g. "SPAN_KIND_SERVER"
    start_time_unix_nano, end_time_unix_nano   integers
    attributes                 {key: value}: string, int, float, bool, list (array_value),
                               dict (kvlist_value), bytes as lowercase hex; non-finite
                               doubles as the strings "nan", "inf", "-inf"
    resource                   {key: value} of the ResourceSpans' resource attributes
    scope                      instrumentation scope name ("" when unset)
    status_code                Status.code as an integer (0 unset, 1 ok, 2 error)
    status_message             Status.message
    events                     [{"name": ..., "time_unix_nano": ..., "attributes": {...}}]
* Answers each Export with an empty ExportTraceServiceResponse and logs the call's span count
  to stderr.
* Exits 0 on SIGTERM or SIGINT (or when its parent process goes away, so that a crashed test
  leaves no receiver behind).
"""

import argparse
import json
import math
import os
import signal
import sys
import threading
from concurrent import futures

os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
sys.dont_write_bytecode = True

import grpc  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import (  # noqa: E402
    trace_service_pb2,
    trace_service_pb2_grpc,
)
from opentelemetry.proto.trace.v1 import trace_pb2  # noqa: E402


def log(msg):
    print(f"otlp_receiver: {msg}", file=sys.stderr, flush=True)


def any_value(v):
    """opentelemetry.proto.common.v1.AnyValue -> a JSON-serialisable Python value."""
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "string_value":
        return v.string_value
    if which == "bool_value":
        return v.bool_value
    if which == "int_value":
        return v.int_value
    if which == "double_value":
        d = v.double_value
        if math.isfinite(d):
            return d
        return "nan" if math.isnan(d) else ("inf" if d > 0 else "-inf")
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return attrs(v.kvlist_value.values)
    if which == "bytes_value":
        return v.bytes_value.hex()
    return None


def attrs(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def kind_name(kind):
    try:
        return trace_pb2.Span.SpanKind.Name(kind)
    except ValueError:
        return str(kind)


class Sink:
    """Appends JSON lines to the output file; one lock so lines never interleave."""

    def __init__(self, path):
        self._f = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, records):
        with self._lock:
            for r in records:
                self._f.write(json.dumps(r, separators=(",", ":")) + "\n")
                self._f.flush()

    def close(self):
        with self._lock:
            self._f.close()


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink):
        self._sink = sink

    def Export(self, request, context):  # noqa: N802 (gRPC method name)
        records = []
        for rs in request.resource_spans:
            resource = attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                scope = ss.scope.name
                for s in ss.spans:
                    records.append(
                        {
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "name": s.name,
                            "kind": int(s.kind),
                            "kind_name": kind_name(s.kind),
                            "start_time_unix_nano": s.start_time_unix_nano,
                            "end_time_unix_nano": s.end_time_unix_nano,
                            "attributes": attrs(s.attributes),
                            "resource": resource,
                            "scope": scope,
                            "status_code": int(s.status.code),
                            "status_message": s.status.message,
                            "events": [
                                {
                                    "name": e.name,
                                    "time_unix_nano": e.time_unix_nano,
                                    "attributes": attrs(e.attributes),
                                }
                                for e in s.events
                            ],
                        }
                    )
        self._sink.write(records)
        log(f"Export: {len(records)} span(s)")
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = pick a free one)")
    ap.add_argument("--out", required=True, help="file to append one JSON line per span to")
    args = ap.parse_args()

    stop = threading.Event()

    def on_signal(signum, _frame):
        log(f"signal {signum}: stopping")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    sink = Sink(args.out)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ],
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(sink), server)
    try:
        port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    except RuntimeError as e:  # grpcio raises when the bind fails (older ones return 0)
        log(f"could not bind 127.0.0.1:{args.port}: {e}")
        sys.exit(1)
    if port == 0:
        log(f"could not bind 127.0.0.1:{args.port}")
        sys.exit(1)
    server.start()
    print(f"LISTENING {port}", flush=True)
    log(f"listening on 127.0.0.1:{port}, writing spans to {args.out}")

    parent = os.getppid()
    while not stop.wait(0.5):
        if os.getppid() != parent:
            log("parent process went away: stopping")
            break
    server.stop(grace=1).wait()
    sink.close()
    log("stopped")


if __name__ == "__main__":
    main()
