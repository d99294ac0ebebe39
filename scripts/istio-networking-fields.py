#!/usr/bin/env python3
"""Writes the field list of Istio's networking.istio.io v1 kinds that tests/field_coverage.rs
walks (tests/fixtures/istio-networking-v1-fields.txt), from Istio's CRD file.

Usage: scripts/istio-networking-fields.py CRD_YAML [SOURCE_NOTE] > tests/fixtures/istio-networking-v1-fields.txt

CRD_YAML is Istio's manifests/charts/base/files/crd-all.gen.yaml (every CRD of a release, as
generated from the protos of istio/api). SOURCE_NOTE says where that file came from (repository,
path, version or commit); it is written at the top of the list. Needs PyYAML.

One line per place a value is set, in the notation of field_coverage.rs: `spec.http[].match[].uri.exact`.
A list adds `[]`; a map whose values are objects (`headers: {NAME: StringMatch}`) adds `.*` for
the key; a map of scalars (`labels`) is a leaf, as is an object of unknown fields. A oneof's
alternatives are each a leaf (`uri.exact`, `uri.prefix`, `uri.regex`): the CRD lists them all
under `properties`.
"""

import sys

import yaml

KINDS = [
    "VirtualService",
    "DestinationRule",
    "Gateway",
    "ServiceEntry",
    "Sidecar",
    "WorkloadEntry",
    "WorkloadGroup",
]
GROUP = "networking.istio.io"
VERSION = "v1"


def walk(schema, path, out):
    """Every leaf of `schema` below `path`."""
    kind = schema.get("type")
    if kind == "array" or "items" in schema:
        walk(schema.get("items") or {}, path + "[]", out)
        return
    props = schema.get("properties")
    if props:
        for name, sub in props.items():
            walk(sub, f"{path}.{name}", out)
        return
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and (
        extra.get("properties") or extra.get("items") or extra.get("additionalProperties")
    ):
        walk(extra, path + ".*", out)
        return
    out.add(path)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    note = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
    with open(sys.argv[1]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    specs = {}
    for d in docs:
        s = d.get("spec") or {}
        if d.get("kind") != "CustomResourceDefinition" or s.get("group") != GROUP:
            continue
        kind = s["names"]["kind"]
        for v in s.get("versions", []):
            if v.get("name") == VERSION:
                specs[kind] = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
    missing = [k for k in KINDS if k not in specs]
    if missing:
        sys.exit(f"no {GROUP}/{VERSION} schema for {missing} in {sys.argv[1]}")
    print(f"# Every field of Istio's {GROUP} {VERSION} kinds meshflow reads, one line per place")
    print("# a value is set (`[]` a list item, `*` a map key). tests/field_coverage.rs checks that")
    print("# tests/fixtures/istio-networking-v1-every-field.yaml sets each, and that each is")
    print("# translated or reported.")
    print(f"# Source: {note}")
    print("# Regenerate: scripts/istio-networking-fields.py crd-all.gen.yaml 'SOURCE NOTE' > this file")
    for kind in KINDS:
        out = set()
        walk(specs[kind], "spec", out)
        print()
        print(f"[{kind}]")
        for p in sorted(out):
            print(p)


if __name__ == "__main__":
    main()
