#!/usr/bin/env python3
"""A minimal, in-memory Confluent Schema Registry for the demo and the bench.

Implements the subset spate uses, as Confluent documents it:
  GET  /schemas/ids/{id}
  GET  /subjects/{subject}/versions/{version}     (a number or `latest`)
  POST /subjects/{subject}/versions               ({"schema": ..., "schemaType": ...})
with optional HTTP basic auth (--user USER:PASSWORD, or --user-file FILE
holding it) and optional TLS (--tls-cert/--tls-key; --tls-client-ca also
requires a client certificate signed by that CA). Schemas live in memory
only. For real deployments run confluentinc/cp-schema-registry (see
docker-compose.yml); the Rust tests use their own copy (tests/e2e/support/registry.rs)
and this one for TLS (tests/e2e/e2e_formats_registry_tls.rs).

  scripts/schema_registry.py --port 8081 [--user u:p] [--tls-cert C --tls-key K [--tls-client-ca CA]]
"""
import argparse
import base64
import json
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
SCHEMAS = []    # [(schemaType or "", text)], id = index + 1
SUBJECTS = {}   # subject -> [ids]


class Handler(BaseHTTPRequestHandler):
    auth = None

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        if self.auth and self.headers.get("Authorization") != self.auth:
            self.answer(401, {"error_code": 401, "message": "Unauthorized"})
            return False
        return True

    def parts(self):
        return [urllib.parse.unquote(p) for p in self.path.strip("/").split("/")]

    def do_GET(self):
        if not self.authorized():
            return
        p = self.parts()
        with LOCK:
            if len(p) == 3 and p[:2] == ["schemas", "ids"] and p[2].isdigit():
                i = int(p[2])
                if 1 <= i <= len(SCHEMAS):
                    ty, text = SCHEMAS[i - 1]
                    body = {"schema": text}
                    if ty:
                        body["schemaType"] = ty
                    return self.answer(200, body)
                return self.answer(404, {"error_code": 40403, "message": "Schema not found"})
            if len(p) == 4 and p[0] == "subjects" and p[2] == "versions":
                ids = SUBJECTS.get(p[1])
                if not ids:
                    return self.answer(404, {"error_code": 40401, "message": "Subject not found"})
                v = len(ids) if p[3] == "latest" else int(p[3]) if p[3].isdigit() else 0
                if not 1 <= v <= len(ids):
                    return self.answer(404, {"error_code": 40402, "message": "Version not found"})
                ty, text = SCHEMAS[ids[v - 1] - 1]
                body = {"subject": p[1], "version": v, "id": ids[v - 1], "schema": text}
                if ty:
                    body["schemaType"] = ty
                return self.answer(200, body)
        self.answer(404, {"error_code": 404, "message": "Endpoint not found"})

    def do_POST(self):
        if not self.authorized():
            return
        p = self.parts()
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
            text = req["schema"]
        except (ValueError, KeyError):
            return self.answer(422, {"error_code": 42201, "message": "Invalid schema"})
        ty = req.get("schemaType", "")
        ty = "" if ty == "AVRO" else ty
        if not (len(p) == 3 and p[0] == "subjects" and p[2] == "versions"):
            return self.answer(404, {"error_code": 404, "message": "Endpoint not found"})
        with LOCK:
            ids = SUBJECTS.setdefault(p[1], [])
            for i in ids:
                if SCHEMAS[i - 1] == (ty, text):
                    return self.answer(200, {"id": i})
            SCHEMAS.append((ty, text))
            ids.append(len(SCHEMAS))
            self.answer(200, {"id": len(SCHEMAS)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--user", help="USER:PASSWORD for basic auth")
    ap.add_argument("--user-file", help="file whose first line is USER:PASSWORD")
    ap.add_argument("--tls-cert", help="PEM server certificate: serve HTTPS")
    ap.add_argument("--tls-key", help="PEM key of --tls-cert")
    ap.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    a = ap.parse_args()
    user = a.user
    if a.user_file:
        with open(a.user_file) as f:
            user = f.readline().rstrip("\r\n")
    if user:
        Handler.auth = "Basic " + base64.b64encode(user.encode()).decode()
    server = ThreadingHTTPServer((a.host, a.port), Handler)
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        if a.tls_client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(a.tls_client_ca)
        # Handshakes happen on accept; a failed one only drops that client.
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"schema registry on {'https' if a.tls_cert else 'http'}://{a.host}:{a.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
