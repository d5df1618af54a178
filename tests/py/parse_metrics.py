#!/usr/bin/env python3
"""Parse Prometheus text-format expositions (as scraped from /metrics) with a real parser.

    parse_metrics.py FILE [FILE ...]

Each FILE is parsed with prometheus_client's own parsers (run it with the python printed by
scripts/ensure-test-venv.sh): an OpenMetrics exposition (one ending in ``# EOF``, as qtg's
``/metrics`` serves with ``application/openmetrics-text``) with the strict
``prometheus_client.openmetrics.parser``, anything else with the Prometheus text-format
``prometheus_client.parser``. On success prints ONE JSON object to
stdout and exits 0:

    {
      "<FILE as given>": {
        "<family name>": {
          "type": "counter" | "gauge" | "histogram" | "summary" | "unknown" | ...,
          "help": "<HELP text>",
          "samples": [{"name": "<sample name>", "labels": {...}, "value": <number>}, ...]
        },
        ...
      },
      ...
    }

Naming: prometheus_client strips the ``_total`` suffix from a counter's FAMILY name (the
family of ``qtg_jobs_total`` is ``qtg_jobs``), while every SAMPLE keeps its full name
(``qtg_jobs_total``, and a histogram's ``..._bucket`` / ``..._sum`` / ``..._count``, with the
bucket bound in the ``le`` label). The family names are kept as the parser gives them.
A family that appears without a ``# TYPE`` line gets type "unknown".

Values are JSON numbers (ints where the value is integral, e.g. 3.0 -> 3); NaN and +/-Inf,
which JSON cannot carry, become the strings "NaN", "+Inf" and "-Inf".

The parser is prometheus_client's own and as lenient as it is: it rejects malformed label
sets and non-numeric values, but accepts e.g. extra trailing tokens after a value and a
repeated ``# TYPE`` line, so a test that must catch those checks the raw text itself.

Errors: any exception while parsing a file prints ``PARSE_ERROR <file>: <err>`` to stderr and
exits 2 (nothing on stdout); an unreadable file prints ``READ_ERROR <file>: <err>`` and exits 2.
"""

import json
import math
import sys

sys.dont_write_bytecode = True

from prometheus_client.openmetrics.parser import (  # noqa: E402
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def json_value(v):
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def parse(text):
    families = {}
    openmetrics = text.rstrip("\n").endswith("# EOF")
    parser = openmetrics_families if openmetrics else text_string_to_metric_families
    for fam in parser(text):
        entry = families.setdefault(
            fam.name, {"type": fam.type, "help": fam.documentation, "samples": []}
        )
        for s in fam.samples:
            entry["samples"].append(
                {"name": s.name, "labels": dict(s.labels), "value": json_value(s.value)}
            )
    return families


def main(argv):
    if not argv:
        print("usage: parse_metrics.py FILE [FILE ...]", file=sys.stderr)
        return 2
    out = {}
    for path in argv:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            print(f"READ_ERROR {path}: {e}", file=sys.stderr)
            return 2
        try:
            out[path] = parse(text)
        except Exception as e:  # noqa: BLE001 - any parser failure is a test failure
            print(f"PARSE_ERROR {path}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
