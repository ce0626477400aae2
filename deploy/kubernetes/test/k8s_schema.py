"""Validation of built-in Kubernetes objects against the JSON schemas
vendored under schemas/ (see schemas/README.md): the subset of JSON Schema
those files use ($ref, type, enum, properties, additionalProperties,
required, items, oneOf, allOf), strict about unknown fields.
"""
import json
import pathlib

SCHEMAS = pathlib.Path(__file__).resolve().parent / "schemas" / "v1.32.0-local-strict"


class Schemas:
    def __init__(self):
        self.defs = json.loads((SCHEMAS / "_definitions.json").read_text())["$defs"]
        self.kinds = {}
        for f in SCHEMAS.glob("*.json"):
            if f.name.startswith("_"):
                continue
            s = json.loads(f.read_text())
            key = (s["properties"]["apiVersion"]["enum"][0], s["properties"]["kind"]["enum"][0])
            self.kinds[key] = s

    def validate(self, obj):
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key not in self.kinds:
            return [f"no vendored schema for {key[0]} {key[1]} (add it to vendor_schemas.py)"]
        errors = []
        self._check(self.kinds[key], obj, "", errors)
        return errors

    def _check(self, schema, value, path, errors):
        if "$ref" in schema:
            schema = self.defs[schema["$ref"].rsplit("/", 1)[-1]]
            return self._check(schema, value, path, errors)
        if "oneOf" in schema:
            ok = [s for s in schema["oneOf"] if not self._sub(s, value, path)]
            if len(ok) != 1:
                errors.append(f"{path or '/'}: {value!r} matches {len(ok)} of oneOf")
            return
        for s in schema.get("allOf", []):
            self._check(s, value, path, errors)
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(type_ok(t, value) for t in types):
                errors.append(f"{path or '/'}: {value!r} is not {'/'.join(types)}")
                return
        if "enum" in schema and value is not None and value not in schema["enum"]:
            errors.append(f"{path or '/'}: {value!r} not one of {schema['enum']}")
        if isinstance(value, dict):
            props = schema.get("properties", {})
            for req in schema.get("required", []):
                if req not in value:
                    errors.append(f"{path}/{req}: required field missing")
            extra = schema.get("additionalProperties", True)
            for k, v in value.items():
                if k in props:
                    self._check(props[k], v, f"{path}/{k}", errors)
                elif extra is False:
                    errors.append(f"{path}/{k}: unknown field")
                elif isinstance(extra, dict):
                    self._check(extra, v, f"{path}/{k}", errors)
        if isinstance(value, list) and "items" in schema:
            for i, v in enumerate(value):
                self._check(schema["items"], v, f"{path}/{i}", errors)

    def _sub(self, schema, value, path):
        errors = []
        self._check(schema, value, path, errors)
        return errors


def type_ok(t, v):
    return {
        "null": v is None,
        "boolean": isinstance(v, bool),
        "integer": isinstance(v, int) and not isinstance(v, bool),
        "number": isinstance(v, (int, float)) and not isinstance(v, bool),
        "string": isinstance(v, str),
        "object": isinstance(v, dict),
        "array": isinstance(v, list),
    }[t]
