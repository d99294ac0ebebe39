#!/usr/bin/env python3
"""Writes the field list of one API group of Istio's kinds, which the field coverage tests walk,
from Istio's CRD file: by default that of networking.istio.io v1, which tests/field_coverage.rs
walks (tests/fixtures/istio-networking-v1-fields.txt); with `--group security.istio.io` that of
the security kinds (tests/fixtures/istio-security-v1-fields.txt).

Usage: scripts/istio-networking-fields.py [--group GROUP] [--kinds KIND,...] [--version VERSION]
           [--fixture PATH] CRD_YAML [SOURCE_NOTE] > LIST

  scripts/istio-networking-fields.py crd-all.gen.yaml 'NOTE' > tests/fixtures/istio-networking-v1-fields.txt
  scripts/istio-networking-fields.py --group security.istio.io crd-all.gen.yaml 'NOTE' \\
      > tests/fixtures/istio-security-v1-fields.txt

CRD_YAML is Istio's manifests/charts/base/files/crd-all.gen.yaml (every CRD of a release, as
generated from the protos of istio/api). SOURCE_NOTE says where that file came from (repository,
path, version or commit); it is written at the top of the list (a note of several lines gives
several header lines: start each later line with `# `). Needs PyYAML.

  --group GROUP      the API group (default networking.istio.io).
  --kinds K1,K2,...  its kinds, in the order the list gives them. Default: the kinds meshflow
                     reads of a group this script knows (KINDS below: networking.istio.io and
                     security.istio.io); needed for any other group.
  --version VERSION  the schema version read (default v1).
  --fixture PATH     the fixture the header says sets every field (default
                     tests/fixtures/istio-NAME-VERSION-every-field.yaml, NAME the group's first
                     label: networking, security).
The header's Regenerate line repeats the flags that differ from their defaults. Without flags
the output is the networking list, as before the flags existed.

One line per place a value is set, in the notation of field_coverage.rs: `spec.http[].match[].uri.exact`.
A list adds `[]`; a map whose values are objects (`headers: {NAME: StringMatch}`) adds `.*` for
the key; a map of scalars (`labels`) is a leaf, as is an object of unknown fields. A oneof's
alternatives are each a leaf (`uri.exact`, `uri.prefix`, `uri.regex`): the CRD lists them all
under `properties`. A field the CRD gives under two names (RequestAuthentication's `jwksUri` and
`jwks_uri`) is listed under each.
"""

import argparse
import sys

import yaml

# The kinds of each group meshflow reads, in the order the list gives them.
KINDS = {
    "networking.istio.io": [
        "VirtualService",
        "DestinationRule",
        "Gateway",
        "ServiceEntry",
        "Sidecar",
        "WorkloadEntry",
        "WorkloadGroup",
    ],
    "security.istio.io": [
        "AuthorizationPolicy",
        "PeerAuthentication",
        "RequestAuthentication",
    ],
}
GROUP = "networking.istio.io"
VERSION = "v1"
SCRIPT = "scripts/istio-networking-fields.py"


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


def default_fixture(group, version):
    return f"tests/fixtures/istio-{group.split('.')[0]}-{version}-every-field.yaml"


def arguments():
    """The command line: flags, CRD_YAML and SOURCE_NOTE."""
    p = argparse.ArgumentParser(
        prog=SCRIPT,
        usage=__doc__.split("Usage: ")[1].split("\n\n")[0].replace(SCRIPT, "%(prog)s"),
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--group", default=GROUP, help=f"the API group (default {GROUP})")
    p.add_argument(
        "--kinds",
        metavar="K1,K2,...",
        help="its kinds, in order (default: those of KINDS for a known group)",
    )
    p.add_argument("--version", default=VERSION, help=f"the schema version (default {VERSION})")
    p.add_argument(
        "--fixture",
        metavar="PATH",
        help="the every-field fixture named in the header "
        "(default tests/fixtures/istio-NAME-VERSION-every-field.yaml)",
    )
    p.add_argument("crd_yaml", metavar="CRD_YAML", help="Istio's crd-all.gen.yaml")
    p.add_argument("note", metavar="SOURCE_NOTE", nargs="?", help="where CRD_YAML came from")
    a = p.parse_args()
    if a.kinds:
        a.kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    elif a.group in KINDS:
        a.kinds = KINDS[a.group]
    else:
        p.error(f"--kinds is needed for {a.group} (kinds known for: {', '.join(KINDS)})")
    fixture = default_fixture(a.group, a.version)
    flags = []
    if a.group != GROUP:
        flags.append(f"--group {a.group}")
    if a.kinds != KINDS.get(a.group):
        flags.append(f"--kinds {','.join(a.kinds)}")
    if a.version != VERSION:
        flags.append(f"--version {a.version}")
    if a.fixture and a.fixture != fixture:
        flags.append(f"--fixture {a.fixture}")
    a.fixture = a.fixture or fixture
    a.flags = "".join(f + " " for f in flags)
    return a


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    a = arguments()
    note = a.note if a.note is not None else a.crd_yaml
    with open(a.crd_yaml) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    specs = {}
    for d in docs:
        s = d.get("spec") or {}
        if d.get("kind") != "CustomResourceDefinition" or s.get("group") != a.group:
            continue
        kind = s["names"]["kind"]
        for v in s.get("versions", []):
            if v.get("name") == a.version:
                specs[kind] = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
    missing = [k for k in a.kinds if k not in specs]
    if missing:
        sys.exit(f"no {a.group}/{a.version} schema for {missing} in {a.crd_yaml}")
    print(f"# Every field of Istio's {a.group} {a.version} kinds meshflow reads, one line per place")
    print("# a value is set (`[]` a list item, `*` a map key). tests/field_coverage.rs checks that")
    print(f"# {a.fixture} sets each, and that each is")
    print("# translated or reported.")
    print(f"# Source: {note}")
    print(f"# Regenerate: {SCRIPT} {a.flags}crd-all.gen.yaml 'SOURCE NOTE' > this file")
    for kind in a.kinds:
        out = set()
        walk(specs[kind], "spec", out)
        print()
        print(f"[{kind}]")
        for p in sorted(out):
            print(p)


if __name__ == "__main__":
    main()
