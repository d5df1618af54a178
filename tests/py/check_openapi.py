#!/usr/bin/env python3
"""Check live API answers against the OpenAPI 3.1 document that served them.

    check_openapi.py DOC.json SAMPLES.json

DOC is the document from /v3/openapi.json. SAMPLES is a JSON list of
``{"method": "GET", "path": "/v3/movements/{id}", "status": 200, "body": <answer>}`` where
``path`` is the document's path template. For each sample the response schema the document
declares for that operation and status (application/json) is looked up and the body validated
with jsonschema's Draft 2020-12 validator (OpenAPI 3.1 schemas are JSON Schema 2020-12), with
``#/components/...`` references resolved against DOC.

Prints one line per sample and exits 0 when every answer conforms; 1 when one does not (each
violation printed), or when a sample's operation/status is not documented.
"""

import json
import sys

import jsonschema


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        doc = json.load(f)
    with open(argv[1]) as f:
        samples = json.load(f)
    failures = 0
    for s in samples:
        where = f'{s["method"]} {s["path"]} {s["status"]}'
        op = doc.get("paths", {}).get(s["path"], {}).get(s["method"].lower())
        if op is None:
            print(f"UNDOCUMENTED operation {where}")
            failures += 1
            continue
        resp = op.get("responses", {}).get(str(s["status"]))
        if resp is None:
            print(f"UNDOCUMENTED status {where}")
            failures += 1
            continue
        schema = resp.get("content", {}).get("application/json", {}).get("schema")
        if schema is None:
            if s.get("body") not in (None, ""):
                print(f"UNDOCUMENTED body {where}")
                failures += 1
            else:
                print(f"ok {where} (no body)")
            continue
        root = dict(schema)
        root["components"] = doc.get("components", {})
        validator = jsonschema.Draft202012Validator(root)
        errors = sorted(validator.iter_errors(s["body"]), key=lambda e: list(e.absolute_path))
        if errors:
            failures += 1
            for e in errors[:10]:
                path = "/".join(str(p) for p in e.absolute_path)
                print(f"MISMATCH {where} at /{path}: {e.message}")
        else:
            print(f"ok {where}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
