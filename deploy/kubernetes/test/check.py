#!/usr/bin/env python3
"""Check the Kubernetes manifests under deploy/kubernetes, offline.

    python3 deploy/kubernetes/test/check.py              # check; exit 1 on any finding
    python3 deploy/kubernetes/test/check.py --self-test  # prove each check can fail
    ... --spate target/release/spate                    # also run spate --print-config on each pod's command line

Renders the top-level kustomization, the base and the example overlay with
`kubectl kustomize` (kustomize 4 or later), then:

- validates every built-in object against the Kubernetes 1.32 JSON schemas
  vendored under schemas/ (strict: an unknown field is an error);
- checks the custom resources (ServiceMonitor, PrometheusRule, ScaledObject,
  TriggerAuthentication) for apiVersion, kind and the fields their
  controllers require;
- checks what spate needs of its pods: probes on /readyz and /healthz at
  the admin port, non-root and a read-only root filesystem with no
  capabilities, a grace period above --shutdown-timeout, group.instance.id
  from the pod's name with a session timeout that outlasts a restart, a
  memory limit of at least --max-buffered-bytes plus the documented
  overhead, secrets only as mounted files, every flag, variable and config
  key one spate has, every alert on metrics spate exports, and KEDA's
  replicas capped at the topic's partition count, scaling on spate's own
  group and topic;
- with --spate BIN, runs that spate with each StatefulSet's arguments,
  variables and config file (laid out in a temporary directory, secrets as
  placeholders) and --print-config: spate's own validation of what the pod
  would start with.

--self-test renders once, applies deliberate breaks to copies of the
rendered objects, and fails unless every break is reported by the check
meant to catch it (and the unbroken objects pass).
"""
import copy
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import spate_reference as ref  # noqa: E402

try:
    import yaml
except ImportError:
    raise SystemExit("check.py needs PyYAML: apt-get install python3-yaml (or pip install pyyaml)")

HERE = pathlib.Path(__file__).resolve().parent
KUBE = HERE.parent
SCHEMAS = HERE / "schemas" / "v1.32.0-local-strict"
TARGETS = {
    "deploy/kubernetes": KUBE,
    "base": KUBE / "base",
    "examples/production": KUBE / "examples" / "production",
}
# What the spate pod's restart takes on top of the old pod's grace period
# (rescheduling, start, reading the table's schema, joining), for the check
# that session.timeout.ms outlasts a restart.
RESTART_ALLOWANCE_S = 30
CONFIG_SECRET_KEYS = {
    "password_file", "kafka_password_file", "clickhouse_ca", "clickhouse_cert",
    "clickhouse_key", "schema_registry_ca", "schema_registry_cert",
    "schema_registry_key", "schema_registry_password_file",
}
SECRET_FLAGS = {f"--{k.replace('_', '-')}" for k in CONFIG_SECRET_KEYS}
INLINE_SECRETS = {"--password", "--schema-registry-password"}
INLINE_SECRET_ENV = {"SPATE_PASSWORD", "SPATE_SCHEMA_REGISTRY_PASSWORD"}
REQUIRED_ALERTS = {
    "SpateConsumerLagGrowing": "lag growing",
    "SpateShardStalled": "stalled shard",
    "SpateRejectedRatioHigh": "rejected ratio",
    "SpateDeadLetters": "dead letters",
    "SpateMemberNotReady": "member not ready",
}
PARTITIONS_ANNOTATION = "spate.dev/topic-partitions"


# ---- rendering -------------------------------------------------------------

def kubectl():
    exe = shutil.which("kubectl")
    if not exe:
        raise SystemExit(
            "check.py: kubectl not found on PATH. It renders the manifests "
            "(`kubectl kustomize`, kustomize 4+, kubectl 1.21+); install kubectl.")
    return exe


def render(path):
    out = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"kubectl kustomize {path} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


# ---- JSON schema (the subset the Kubernetes schemas use) -------------------

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


# ---- custom resources ------------------------------------------------------

def check_servicemonitor(o):
    e = []
    spec = o.get("spec") or {}
    if o.get("apiVersion") != "monitoring.coreos.com/v1":
        e.append(f"ServiceMonitor apiVersion {o.get('apiVersion')!r}, not monitoring.coreos.com/v1")
    if not isinstance(spec.get("selector"), dict):
        e.append("ServiceMonitor: spec.selector missing")
    eps = spec.get("endpoints")
    if not eps:
        e.append("ServiceMonitor: spec.endpoints missing or empty")
    for ep in eps or []:
        if not (ep.get("port") or ep.get("targetPort")):
            e.append("ServiceMonitor: an endpoint names no port")
        if ep.get("path", "/metrics") != "/metrics":
            e.append(f"ServiceMonitor: endpoint path {ep.get('path')!r}, spate serves /metrics")
    return e


def check_prometheusrule(o, metrics):
    e = []
    if o.get("apiVersion") != "monitoring.coreos.com/v1":
        e.append(f"PrometheusRule apiVersion {o.get('apiVersion')!r}, not monitoring.coreos.com/v1")
    groups = (o.get("spec") or {}).get("groups")
    if not groups:
        e.append("PrometheusRule: spec.groups missing or empty")
    alerts = set()
    for g in groups or []:
        if not g.get("name"):
            e.append("PrometheusRule: a group has no name")
        for r in g.get("rules") or []:
            name = r.get("alert") or r.get("record")
            if not name or not r.get("expr"):
                e.append(f"PrometheusRule: rule {name!r} needs alert (or record) and expr")
                continue
            if "for" in r and not re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", str(r["for"])):
                e.append(f"PrometheusRule: {name}: `for: {r['for']}` is not a duration")
            alerts.add(r.get("alert"))
            for m in set(re.findall(r"\bspate_[a-z0-9_]+", r["expr"])):
                if m not in metrics:
                    e.append(f"PrometheusRule: {name} uses {m}, which spate does not export")
    for alert, what in REQUIRED_ALERTS.items():
        if alert not in alerts:
            e.append(f"PrometheusRule: no {alert} alert ({what})")
    return e


def check_scaledobject(o, objs):
    e = []
    if o.get("apiVersion") != "keda.sh/v1alpha1":
        e.append(f"ScaledObject apiVersion {o.get('apiVersion')!r}, not keda.sh/v1alpha1")
    spec = o.get("spec") or {}
    target = spec.get("scaleTargetRef") or {}
    if not target.get("name"):
        e.append("ScaledObject: spec.scaleTargetRef.name missing")
    sts = [x for x in objs if x["kind"] == target.get("kind", "Deployment")
           and x["metadata"]["name"] == target.get("name")
           and x["metadata"].get("namespace") == o["metadata"].get("namespace")]
    if target.get("kind") != "StatefulSet" or not sts:
        e.append(f"ScaledObject: scaleTargetRef {target} is not a StatefulSet rendered here")
    elif "replicas" in sts[0]["spec"]:
        e.append("ScaledObject: its StatefulSet sets spec.replicas, which every apply resets")
    triggers = spec.get("triggers")
    if not triggers:
        e.append("ScaledObject: spec.triggers missing or empty")
    for t in triggers or []:
        if not t.get("type") or not isinstance(t.get("metadata"), dict):
            e.append("ScaledObject: a trigger needs type and metadata")
    # a kafka trigger measures the lag of spate's own group and topics
    configs = [tomllib.loads(x["data"]["spate.toml"]) for x in objs if x["kind"] == "ConfigMap"
               and x["metadata"].get("namespace") == o["metadata"].get("namespace")
               and "spate.toml" in (x.get("data") or {})]
    for t in triggers or []:
        md = t.get("metadata") or {}
        if t.get("type") != "kafka" or not configs:
            continue
        cfg = configs[0]
        if md.get("consumerGroup") != cfg.get("group"):
            e.append(f"ScaledObject: kafka trigger consumerGroup {md.get('consumerGroup')!r} "
                     f"is not spate's group {cfg.get('group')!r}")
        if md.get("topic") and md["topic"] not in (cfg.get("topics") or []):
            e.append(f"ScaledObject: kafka trigger topic {md['topic']!r} is not one of spate's {cfg.get('topics')}")
        if md.get("bootstrapServers") != cfg.get("brokers"):
            e.append("ScaledObject: kafka trigger bootstrapServers differ from spate's brokers")
    parts = (o["metadata"].get("annotations") or {}).get(PARTITIONS_ANNOTATION)
    mx, mn = spec.get("maxReplicaCount"), spec.get("minReplicaCount", 0)
    if parts is None or not str(parts).isdigit():
        e.append(f"ScaledObject: annotation {PARTITIONS_ANNOTATION} (the topic's partitions) missing")
    elif not isinstance(mx, int) or mx > int(parts):
        e.append(f"ScaledObject: maxReplicaCount {mx!r} above the topic's {parts} partitions")
    if isinstance(mx, int) and (not isinstance(mn, int) or mn > mx or mn < 1):
        e.append(f"ScaledObject: minReplicaCount {mn!r} must be 1..maxReplicaCount")
    return e


def check_triggerauth(o):
    e = []
    if o.get("apiVersion") != "keda.sh/v1alpha1":
        e.append(f"TriggerAuthentication apiVersion {o.get('apiVersion')!r}, not keda.sh/v1alpha1")
    for r in (o.get("spec") or {}).get("secretTargetRef") or []:
        if not all(r.get(k) for k in ("parameter", "name", "key")):
            e.append("TriggerAuthentication: a secretTargetRef needs parameter, name and key")
    return e


# ---- spate's pods ----------------------------------------------------------

def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def spate_container(sts):
    cs = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "spate"]
    return cs[0] if cs else None


def settings(c, config, flags):
    """spate's effective value of each setting the pod spec depends on: a flag
    wins over its SPATE_* variable, which wins over the config file, then
    the default (docs/flags.md)."""
    args = c.get("args") or []
    env = {v["name"]: v.get("value") for v in c.get("env") or []}

    def value(flag):
        for i, a in enumerate(args):
            if a == f"--{flag}" and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(f"--{flag}="):
                return a.split("=", 1)[1]
        name = "SPATE_" + flag.upper().replace("-", "_")
        if env.get(name) is not None:
            return env[name]
        if flag.replace("-", "_") in config:
            return config[flag.replace("-", "_")]
        return flags.defaults.get(flag)

    props = {}
    for i, a in enumerate(args):
        kv = None
        if a in ("-X", "--property") and i + 1 < len(args):
            kv = args[i + 1]
        elif a.startswith("-X") and len(a) > 2:
            kv = a[2:].lstrip("=")
        elif a.startswith("--property="):
            kv = a.split("=", 1)[1]
        if kv and "=" in kv:
            k, v = kv.split("=", 1)
            props[k.strip()] = v
    merged = dict(config.get("kafka") or {})
    merged.update(props)
    return value, merged, env


def mounted_files(pod, c, objs, ns):
    """path -> (volume kind, key) for every file the container sees from a
    Secret or ConfigMap volume."""
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    files = {}
    for m in c.get("volumeMounts") or []:
        v = vols.get(m["name"])
        if not v:
            continue
        for kind in ("secret", "configMap"):
            src = v.get(kind)
            if src is None:
                continue
            name = src.get("secretName") if kind == "secret" else src.get("name")
            items = src.get("items")
            if items is None:
                obj = [o for o in objs if o["kind"] == ("Secret" if kind == "secret" else "ConfigMap")
                       and o["metadata"]["name"] == name and o["metadata"].get("namespace") == ns]
                keys = list((obj[0].get("data") or obj[0].get("stringData") or {}).keys()) if obj else []
                items = [{"key": k, "path": k} for k in keys]
            for it in items:
                path = f"{m['mountPath'].rstrip('/')}/{it['path']}"
                if m.get("subPath"):
                    if m["subPath"] == it["path"]:
                        files[m["mountPath"]] = (kind, name, it["key"])
                else:
                    files[path] = (kind, name, it["key"])
    return files


def check_statefulset(sts, objs, flags):
    e = []
    name = sts["metadata"]["name"]
    ns = sts["metadata"].get("namespace")
    pod = sts["spec"]["template"]["spec"]
    labels = sts["spec"]["template"]["metadata"].get("labels") or {}
    c = spate_container(sts)
    if c is None:
        return [f"StatefulSet {name}: no container named spate"]
    args = c.get("args") or []
    if not args or args[0] != "run":
        e.append(f"StatefulSet {name}: args must start with `run` (the image's ENTRYPOINT is spate)")
    for bad in flags.unknown_args(args[1:]):
        e.append(f"StatefulSet {name}: {bad} is not a flag of `spate run` (docs/flags.md)")
    for v in c.get("env") or []:
        if v["name"].startswith("SPATE_") and v["name"] not in flags.env:
            e.append(f"StatefulSet {name}: env {v['name']} is not a spate variable (docs/flags.md)")
        if v["name"] in INLINE_SECRET_ENV:
            e.append(f"StatefulSet {name}: {v['name']} puts a secret in the environment; use a file")
    for a in args:
        if a.split("=", 1)[0] in INLINE_SECRETS:
            e.append(f"StatefulSet {name}: {a.split('=', 1)[0]} puts a secret on the command line")
        if re.match(r"(-X|--property)?=?\s*sasl\.password=", a):
            e.append(f"StatefulSet {name}: sasl.password on the command line; use --kafka-password-file")

    files = mounted_files(pod, c, objs, ns)

    # the config file: a ConfigMap file, TOML, only keys spate knows
    config = {}
    cfg_path = next((a.split("=", 1)[1] for a in args if a.startswith("--config=")), None)
    if cfg_path is None and "--config" in args:
        cfg_path = args[args.index("--config") + 1]
    if cfg_path:
        src = files.get(cfg_path)
        if not src or src[0] != "configMap":
            e.append(f"StatefulSet {name}: --config {cfg_path} is not a file of a mounted ConfigMap")
        else:
            cm = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == src[1]
                  and o["metadata"].get("namespace") == ns]
            if not cm or src[2] not in (cm[0].get("data") or {}):
                e.append(f"StatefulSet {name}: ConfigMap {src[1]} with key {src[2]} is not rendered")
            else:
                try:
                    config = tomllib.loads(cm[0]["data"][src[2]])
                except tomllib.TOMLDecodeError as err:
                    e.append(f"ConfigMap {src[1]}: {src[2]} is not TOML: {err}")
                for k in config:
                    if k not in flags.keys and k not in ("kafka", "pipeline"):
                        e.append(f"ConfigMap {src[1]}: `{k}` is not a spate config key (docs/flags.md)")
    value, props, env = settings(c, config, flags)

    # secrets: every secret file spate reads is a file of a mounted Secret
    secret_paths = [(a.split("=", 1)[0], a.split("=", 1)[1]) for a in args
                    if "=" in a and a.split("=", 1)[0] in SECRET_FLAGS]
    secret_paths += [(a, args[i + 1]) for i, a in enumerate(args) if a in SECRET_FLAGS and i + 1 < len(args)]
    secret_paths += [(k, v) for k, v in config.items() if k in CONFIG_SECRET_KEYS]
    secret_paths += [(k, v) for k, v in props.items() if k.endswith(".location") and k.startswith("ssl.")]
    if not secret_paths:
        e.append(f"StatefulSet {name}: no secret file passed (--password-file, --clickhouse-ca, ...)")
    for what, path in secret_paths:
        src = files.get(path)
        if not src or src[0] != "secret":
            e.append(f"StatefulSet {name}: {what} {path} is not a file of a mounted Secret")
    if "sasl.password" in props or "password" in config:
        e.append(f"StatefulSet {name}: a password in the config or -X; use a password file")

    # probes on the admin port
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
    admin = value("admin-addr")
    if not admin:
        e.append(f"StatefulSet {name}: no --admin-addr: no probes, no metrics")
        admin_port = None
    else:
        host, _, port = str(admin).rpartition(":")
        admin_port = int(port)
        if host in ("127.0.0.1", "localhost", "[::1]"):
            e.append(f"StatefulSet {name}: --admin-addr {admin} is loopback; the kubelet cannot probe it")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = (c.get(probe) or {}).get("httpGet")
        if not get:
            e.append(f"StatefulSet {name}: {probe} is not an httpGet")
            continue
        if get.get("path") != path:
            e.append(f"StatefulSet {name}: {probe} path {get.get('path')!r}, must be {path}")
        port = ports.get(get["port"], get["port"])
        if port != admin_port:
            e.append(f"StatefulSet {name}: {probe} port {get['port']} is not the admin port {admin_port}")

    # security
    psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    if not csc.get("runAsNonRoot", psc.get("runAsNonRoot")):
        e.append(f"StatefulSet {name}: runAsNonRoot is not set")
    if csc.get("runAsUser", psc.get("runAsUser")) == 0:
        e.append(f"StatefulSet {name}: runAsUser 0")
    if csc.get("readOnlyRootFilesystem") is not True:
        e.append(f"StatefulSet {name}: readOnlyRootFilesystem is not true")
    if csc.get("allowPrivilegeEscalation") is not False:
        e.append(f"StatefulSet {name}: allowPrivilegeEscalation is not false")
    if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
        e.append(f"StatefulSet {name}: capabilities do not drop ALL")
    if (csc.get("capabilities") or {}).get("add"):
        e.append(f"StatefulSet {name}: capabilities added")

    # shutdown within the grace period
    grace = pod.get("terminationGracePeriodSeconds", 30)
    try:
        shutdown = ref.parse_duration(value("shutdown-timeout"))
    except ValueError as err:
        e.append(f"StatefulSet {name}: --shutdown-timeout: {err}")
        shutdown = float("inf")
    if not grace > shutdown:
        e.append(f"StatefulSet {name}: terminationGracePeriodSeconds {grace} is not above "
                 f"--shutdown-timeout {shutdown:g}s")

    # static membership
    gid = props.get("group.instance.id")
    m = re.fullmatch(r"\$\((\w+)\)", gid or "")
    if not m:
        e.append(f"StatefulSet {name}: no -X group.instance.id=$(VAR) (static membership)")
    else:
        var = [v for v in c.get("env") or [] if v["name"] == m.group(1)]
        field = var and ((var[0].get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field != "metadata.name":
            e.append(f"StatefulSet {name}: group.instance.id comes from {m.group(1)}, "
                     f"which is not the pod's metadata.name")
    session = props.get("session.timeout.ms")
    need_ms = (grace + RESTART_ALLOWANCE_S) * 1000
    if session is None or not str(session).isdigit() or int(session) < need_ms:
        e.append(f"StatefulSet {name}: session.timeout.ms {session} does not outlast a restart "
                 f"(grace {grace}s + {RESTART_ALLOWANCE_S}s = {need_ms} ms)")

    # memory: the budget plus the documented overhead
    limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
    try:
        need = ref.parse_bytes(value("max-buffered-bytes")) + ref.documented_overhead_bytes()
    except ValueError as err:
        e.append(f"StatefulSet {name}: --max-buffered-bytes: {err}")
        need = 0
    if limit is None:
        e.append(f"StatefulSet {name}: no memory limit")
    elif quantity(limit) < need:
        e.append(f"StatefulSet {name}: memory limit {limit} below --max-buffered-bytes "
                 f"{value('max-buffered-bytes')} + documented overhead ({need >> 20} MiB)")

    # the Service, the PDB, the ServiceMonitor reach these pods
    svcs = [o for o in objs if o["kind"] == "Service" and o["metadata"].get("namespace") == ns
            and selects(o["spec"].get("selector"), labels)]
    if sts["spec"].get("serviceName") not in [s["metadata"]["name"] for s in svcs]:
        e.append(f"StatefulSet {name}: serviceName {sts['spec'].get('serviceName')!r} is no Service selecting its pods")
    metrics_ports = [p for s in svcs for p in s["spec"].get("ports") or []
                     if p.get("targetPort") in ("admin", admin_port) or p.get("port") == admin_port]
    if not metrics_ports:
        e.append(f"StatefulSet {name}: no Service port reaches the admin port")
    pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget" and o["metadata"].get("namespace") == ns
            and selects((o["spec"].get("selector") or {}).get("matchLabels"), labels)]
    if not pdbs:
        e.append(f"StatefulSet {name}: no PodDisruptionBudget selects its pods")
    for sm in [o for o in objs if o["kind"] == "ServiceMonitor"]:
        sel = (sm["spec"].get("selector") or {}).get("matchLabels")
        hit = [s for s in svcs if selects(sel, s["metadata"].get("labels") or {})]
        names = {p.get("name") for s in hit for p in s["spec"].get("ports") or []}
        if not hit:
            e.append(f"ServiceMonitor {sm['metadata']['name']}: selects no Service of StatefulSet {name}")
        for ep in sm["spec"].get("endpoints") or []:
            if ep.get("port") and ep["port"] not in names:
                e.append(f"ServiceMonitor {sm['metadata']['name']}: port {ep['port']!r} is not a Service port name")
    return e


def quantity(q):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T|)", str(q))
    if not m:
        raise ValueError(f"{q!r} is not a memory quantity")
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
                                "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m.group(2)]


# ---- the real binary reads what the pod would give it ----------------------

def print_config(spate, sts, objs):
    """Run `spate <the container's args> --print-config` with the container's
    environment and its ConfigMap and Secret files laid out in a temporary
    directory (secrets as placeholders): spate's own validation of the
    flags, variables and config file the pod would start with. Findings."""
    name = sts["metadata"]["name"]
    ns = sts["metadata"].get("namespace")
    pod = sts["spec"]["template"]["spec"]
    c = spate_container(sts)
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    with tempfile.TemporaryDirectory(prefix="spate-check-") as tmp:
        mounts = sorted((m["mountPath"] for m in c.get("volumeMounts") or []), key=len, reverse=True)

        pattern = re.compile("|".join(re.escape(m) for m in mounts)) if mounts else None

        def local(text):  # one pass: tmp itself may start with a mount path
            return pattern.sub(lambda m: tmp + m.group(0), text) if pattern else text

        for m in c.get("volumeMounts") or []:
            v = vols.get(m["name"]) or {}
            files = {}
            if "configMap" in v:
                cm = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == v["configMap"]["name"]
                      and o["metadata"].get("namespace") == ns]
                files = {k: local(d) for k, d in ((cm[0].get("data") or {}) if cm else {}).items()}
            elif "secret" in v:
                files = {it["path"]: "placeholder\n" for it in v["secret"].get("items") or []}
            for key, data in files.items():
                if m.get("subPath") and m["subPath"] != key:
                    continue
                path = pathlib.Path(tmp + m["mountPath"]) if m.get("subPath") else pathlib.Path(tmp + m["mountPath"]) / key
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(data)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for v in c.get("env") or []:
            if "value" in v:
                env[v["name"]] = local(str(v["value"]))
            elif ((v.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == "metadata.name":
                env[v["name"]] = f"{name}-0"
        args = [local(re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a))
                for a in c.get("args") or []]
        out = subprocess.run([spate, *args, "--print-config"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return [f"StatefulSet {name}: spate {' '.join(args[:1])} ... --print-config exits "
                f"{out.returncode}: {out.stderr.strip().replace(tmp, '')}"]
    if f'"group.instance.id" = "{name}-0"' not in out.stdout:
        return [f"StatefulSet {name}: spate's effective [kafka] has no group.instance.id = {name}-0"]
    return []


# ---- the whole check -------------------------------------------------------

CUSTOM = {"ServiceMonitor", "PrometheusRule", "ScaledObject", "TriggerAuthentication"}


def check(rendered, schemas, flags, metrics, spate=None):
    """Findings for every rendered target: {target: [message, ...]}. With
    `spate` (the binary), also what spate says of each StatefulSet's
    command line."""
    findings = {}
    for target, objs in rendered.items():
        e = []
        for o in objs:
            kind = o.get("kind")
            where = f"{kind} {o.get('metadata', {}).get('name')}"
            if kind == "ServiceMonitor":
                e += check_servicemonitor(o)
            elif kind == "PrometheusRule":
                e += check_prometheusrule(o, metrics)
            elif kind == "ScaledObject":
                e += check_scaledobject(o, objs)
            elif kind == "TriggerAuthentication":
                e += check_triggerauth(o)
            else:
                e += [f"{where}: schema: {x}" for x in schemas.validate(o)]
        stss = [o for o in objs if o.get("kind") == "StatefulSet"]
        if not stss:
            e.append("no StatefulSet rendered")
        for s in stss:
            if "spec" in s and "template" in s["spec"]:
                e += check_statefulset(s, objs, flags)
                if spate:
                    e += print_config(spate, s, objs)
        for kind in ("Service", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"):
            if not any(o.get("kind") == kind for o in objs):
                e.append(f"no {kind} rendered")
        findings[target] = e
    return findings


def find(objs, kind):
    return next(o for o in objs if o["kind"] == kind)


def container(objs):
    return spate_container(find(objs, "StatefulSet"))


def env(objs, name):
    return next(v for v in container(objs)["env"] if v["name"] == name)


def set_arg(objs, prefix, new):
    args = container(objs)["args"]
    i = next(i for i, a in enumerate(args) if a.startswith(prefix))
    if new is None:
        del args[i]
        if args[i - 1] == "-X":
            del args[i - 1]
    else:
        args[i] = new


def pod_sc(objs):
    return find(objs, "StatefulSet")["spec"]["template"]["spec"]


def rules(objs):
    return find(objs, "PrometheusRule")["spec"]["groups"][0]["rules"]


# (target, what it breaks, the break, a substring the finding must contain)
BREAKS = [
    ("base", "readiness probe on /healthz",
     lambda o: container(o)["readinessProbe"]["httpGet"].update(path="/healthz"), "readinessProbe path"),
    ("base", "liveness probe on /metrics",
     lambda o: container(o)["livenessProbe"]["httpGet"].update(path="/metrics"), "livenessProbe path"),
    ("base", "probe on another port",
     lambda o: container(o)["readinessProbe"]["httpGet"].update(port=8080), "not the admin port"),
    ("base", "admin address on loopback",
     lambda o: env(o, "SPATE_ADMIN_ADDR").update(value="127.0.0.1:9187"), "is loopback"),
    ("base", "runAsNonRoot dropped",
     lambda o: (pod_sc(o)["securityContext"].pop("runAsNonRoot"),
                container(o)["securityContext"].pop("runAsNonRoot")), "runAsNonRoot is not set"),
    ("base", "writable root filesystem",
     lambda o: container(o)["securityContext"].update(readOnlyRootFilesystem=False), "readOnlyRootFilesystem"),
    ("base", "capabilities kept",
     lambda o: container(o)["securityContext"]["capabilities"].update(drop=[]), "drop ALL"),
    ("base", "grace period equal to the shutdown timeout",
     lambda o: pod_sc(o).update(terminationGracePeriodSeconds=30), "not above --shutdown-timeout"),
    ("examples/production", "shutdown timeout raised past the grace period",
     lambda o: env(o, "SPATE_SHUTDOWN_TIMEOUT").update(value="1m"), "not above --shutdown-timeout"),
    ("base", "group.instance.id from the pod's uid",
     lambda o: env(o, "POD_NAME")["valueFrom"]["fieldRef"].update(fieldPath="metadata.uid"),
     "not the pod's metadata.name"),
    ("base", "no group.instance.id",
     lambda o: set_arg(o, "group.instance.id=", None), "static membership"),
    ("base", "session timeout shorter than a restart",
     lambda o: set_arg(o, "session.timeout.ms=", "session.timeout.ms=45000"), "does not outlast a restart"),
    ("base", "memory limit below budget + overhead",
     lambda o: container(o)["resources"]["limits"].update(memory="300Mi"), "memory limit 300Mi below"),
    ("examples/production", "budget raised without the limit",
     lambda o: env(o, "SPATE_MAX_BUFFERED_BYTES").update(value="2GiB"), "below --max-buffered-bytes"),
    ("base", "password file not from the Secret",
     lambda o: set_arg(o, "--password-file=", "--password-file=/etc/passwd"), "not a file of a mounted Secret"),
    ("base", "password in the environment",
     lambda o: container(o)["env"].append({"name": "SPATE_PASSWORD", "value": "x"}), "secret in the environment"),
    ("base", "a flag spate does not have",
     lambda o: container(o)["args"].append("--max-buffered-byte=1G"), "not a flag of `spate run`"),
    ("base", "a variable spate does not have",
     lambda o: env(o, "SPATE_DRIVERS").update(name="SPATE_DRIVER"), "not a spate variable"),
    ("base", "a config key spate does not have",
     lambda o: find(o, "ConfigMap")["data"].update({"spate.toml": find(o, "ConfigMap")["data"]["spate.toml"]
                                                     .replace("group =", "consumer_group =")}),
     "not a spate config key"),
    ("base", "schema: misspelt field",
     lambda o: container(o).update(livenesProbe=container(o).pop("livenessProbe")), "livenesProbe: unknown field"),
    ("base", "schema: wrong type",
     lambda o: find(o, "StatefulSet")["spec"].update(replicas="2"), "/spec/replicas: '2' is not integer"),
    ("base", "schema: required field missing",
     lambda o: find(o, "StatefulSet")["spec"].pop("selector"), "/spec/selector: required field missing"),
    ("base", "schema: neither string nor integer (int-or-string)",
     lambda o: find(o, "Service")["spec"]["ports"][0].update(targetPort=9187.5), "matches 0 of oneOf"),
    ("base", "an apiVersion with no schema (apps/v1beta2)",
     lambda o: find(o, "StatefulSet").update(apiVersion="apps/v1beta2"), "no vendored schema"),
    ("base", "Service selects other pods",
     lambda o: find(o, "Service")["spec"]["selector"].update({"app.kubernetes.io/instance": "other"}),
     "is no Service selecting its pods"),
    ("base", "PDB selects other pods",
     lambda o: find(o, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].update(
         {"app.kubernetes.io/instance": "other"}), "no PodDisruptionBudget"),
    ("base", "ServiceMonitor without endpoints",
     lambda o: find(o, "ServiceMonitor")["spec"].pop("endpoints"), "spec.endpoints missing"),
    ("base", "ServiceMonitor on a port name the Service lacks",
     lambda o: find(o, "ServiceMonitor")["spec"]["endpoints"][0].update(port="metrics"),
     "is not a Service port name"),
    ("base", "ServiceMonitor wrong apiVersion",
     lambda o: find(o, "ServiceMonitor").update(apiVersion="monitoring.coreos.com/v1beta1"), "apiVersion"),
    ("base", "alert on a metric spate does not export",
     lambda o: rules(o)[0].update(expr=rules(o)[0]["expr"].replace("spate_consumer_lag", "spate_lag")),
     "uses spate_lag"),
    ("base", "an alert missing",
     lambda o: rules(o).pop(next(i for i, r in enumerate(rules(o)) if r["alert"] == "SpateDeadLetters")),
     "no SpateDeadLetters"),
    ("base", "alert without expr",
     lambda o: rules(o)[0].pop("expr"), "needs alert (or record) and expr"),
    ("examples/production", "KEDA above the partition count",
     lambda o: find(o, "ScaledObject")["spec"].update(maxReplicaCount=13), "above the topic's 12 partitions"),
    ("examples/production", "KEDA without the partition count",
     lambda o: find(o, "ScaledObject")["metadata"]["annotations"].pop(PARTITIONS_ANNOTATION),
     "partitions) missing"),
    ("examples/production", "KEDA on a Deployment",
     lambda o: find(o, "ScaledObject")["spec"]["scaleTargetRef"].update(kind="Deployment"),
     "is not a StatefulSet"),
    ("examples/production", "replicas fixed under KEDA",
     lambda o: find(o, "StatefulSet")["spec"].update(replicas=2), "sets spec.replicas"),
    ("examples/production", "KEDA measuring another group's lag",
     lambda o: find(o, "ScaledObject")["spec"]["triggers"][0]["metadata"].update(consumerGroup="spate"),
     "is not spate's group"),
    ("examples/production", "KEDA measuring another topic",
     lambda o: find(o, "ScaledObject")["spec"]["triggers"][0]["metadata"].update(topic="event"),
     "is not one of spate's"),
    ("examples/production", "ScaledObject without triggers",
     lambda o: find(o, "ScaledObject")["spec"].pop("triggers"), "spec.triggers missing"),
    ("examples/production", "ScaledObject wrong apiVersion",
     lambda o: find(o, "ScaledObject").update(apiVersion="keda.sh/v1"), "not keda.sh/v1alpha1"),
]


def set_toml(objs, old, new):
    cm = find(objs, "ConfigMap")
    key = next(iter(cm["data"]))
    assert old in cm["data"][key], old
    cm["data"][key] = cm["data"][key].replace(old, new)


# Breaks only spate itself can see (with --spate): values it refuses.
SPATE_BREAKS = [
    ("base", "a config value spate refuses",
     lambda o: set_toml(o, 'log_format = "json"', 'log_format = "xml"'), "--print-config exits 2"),
    ("examples/production", "dead-lettering without a destination",
     lambda o: set_toml(o, 'dead_letter_topic = "events-dead-letters"', ''), "--print-config exits 2"),
    ("base", "a size spate cannot read",
     lambda o: env(o, "SPATE_MAX_BUFFERED_BYTES").update(value="256MB!"), "--print-config exits 2"),
]


def self_test(rendered, schemas, flags, metrics, spate):
    base = check(rendered, schemas, flags, metrics, spate)
    failures = [f"unbroken {t}: {x}" for t, xs in base.items() for x in xs]
    caught = 0
    breaks = BREAKS + (SPATE_BREAKS if spate else [])
    for target, what, brk, expect in breaks:
        objs = copy.deepcopy(rendered[target])
        brk(objs)
        found = check({target: objs}, schemas, flags, metrics, spate)[target]
        if any(expect in x for x in found):
            caught += 1
            print(f"  caught: {what}")
        else:
            failures.append(f"break not caught: {what} (wanted a finding with {expect!r}; got {found})")
    for f in failures:
        print(f"FAIL {f}")
    print(f"self-test: {caught} of {len(breaks)} breaks caught")
    return not failures


def main():
    argv = sys.argv[1:]
    spate = None
    if "--spate" in argv:
        spate = argv[argv.index("--spate") + 1]
    schemas, flags, metrics = Schemas(), ref.Flags("run"), ref.metric_names()
    rendered = {t: render(p) for t, p in TARGETS.items()}
    if "--self-test" in argv:
        sys.exit(0 if self_test(rendered, schemas, flags, metrics, spate) else 1)
    findings = check(rendered, schemas, flags, metrics, spate)
    bad = 0
    for target, xs in findings.items():
        kinds = ", ".join(sorted({o["kind"] for o in rendered[target]}))
        print(f"{target}: {len(rendered[target])} objects ({kinds}): "
              f"{'ok' if not xs else f'{len(xs)} findings'}")
        for x in xs:
            print(f"  {x}")
        bad += len(xs)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
