"""JSON schemas for kubeconform, made from a real kube-apiserver's OpenAPI.

kubeconform downloads its schemas from GitHub, which this machine cannot
reach; the API server we test against (Kubernetes 1.35, our CRDs installed)
publishes the same definitions. One file per kind, laid out for kubeconform's
``{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json`` template, each
holding the definitions it references. Strict like openapi2jsonschema's
``--strict``: objects reject unknown fields unless Kubernetes keeps them
(``x-kubernetes-preserve-unknown-fields``), int-or-string and quantities take
both forms.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

REF = "#/definitions/"
TEMPLATE = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
BOTH = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": [{"type": "string"}, {"type": "integer"}],
    "io.k8s.apimachinery.pkg.api.resource.Quantity": [{"type": "string"}, {"type": "number"}],
}


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF):
            found.add(ref.removeprefix(REF))
        for value in node.values():
            found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        if out.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["oneOf"] = BOTH["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def write_schemas(openapi_v2: dict[str, Any], out: Path) -> int:
    """Writes one schema per group/version/kind under ``out``; returns how many."""
    definitions = {name: _strict(d) for name, d in openapi_v2["definitions"].items()}
    for name, forms in BOTH.items():
        definitions[name] = {"oneOf": forms}
    written = 0
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            closure, todo = {}, [name]
            while todo:
                ref = todo.pop()
                if ref not in closure and ref in definitions:
                    closure[ref] = definitions[ref]
                    todo += _refs(definitions[ref])
            schema = copy.deepcopy(definition) | {"definitions": closure}
            # kubeconform's {{.Group}}: the full group; for the core group (apiVersion
            # "v1", no slash) it is the whole apiVersion
            group = gvk["group"] or gvk["version"]
            path = out / group / f"{gvk['kind'].lower()}_{gvk['version']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(schema))
            written += 1
    return written
