"""What spate needs of its pods, checked on a rendered StatefulSet (the
Member class, one check per concern), and, with a spate binary, what spate
itself says of the command line, variables and config file a pod would
start with (print_config).
"""
import os
import pathlib
import re
import subprocess
import tempfile
import tomllib

import spate_reference as ref

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


class Member:
    """One StatefulSet's spate container and what spate would make of it:
    its arguments, variables, mounted files, config file and effective
    settings. Each check_* method adds findings to `findings`."""

    def __init__(self, sts, objs, flags):
        self.sts, self.objs, self.flags = sts, objs, flags
        self.name = sts["metadata"]["name"]
        self.ns = sts["metadata"].get("namespace")
        self.pod = sts["spec"]["template"]["spec"]
        self.labels = sts["spec"]["template"]["metadata"].get("labels") or {}
        self.c = spate_container(sts)
        self.args = self.c.get("args") or []
        self.files = mounted_files(self.pod, self.c, objs, self.ns)
        self.findings = []
        self.config = self.load_config()
        self.value, self.props, self.env = settings(self.c, self.config, flags)
        self.grace = self.pod.get("terminationGracePeriodSeconds", 30)
        self.admin_port = None

    def bad(self, message):
        self.findings.append(f"StatefulSet {self.name}: {message}")

    def load_config(self):
        """The --config file: a file of a mounted ConfigMap, TOML, only keys
        spate knows."""
        args = self.args
        path = next((a.split("=", 1)[1] for a in args if a.startswith("--config=")), None)
        if path is None and "--config" in args:
            path = args[args.index("--config") + 1]
        if not path:
            return {}
        src = self.files.get(path)
        if not src or src[0] != "configMap":
            self.bad(f"--config {path} is not a file of a mounted ConfigMap")
            return {}
        cm = [o for o in self.objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == src[1]
              and o["metadata"].get("namespace") == self.ns]
        if not cm or src[2] not in (cm[0].get("data") or {}):
            self.bad(f"ConfigMap {src[1]} with key {src[2]} is not rendered")
            return {}
        try:
            config = tomllib.loads(cm[0]["data"][src[2]])
        except tomllib.TOMLDecodeError as err:
            self.findings.append(f"ConfigMap {src[1]}: {src[2]} is not TOML: {err}")
            return {}
        for k in config:
            if k not in self.flags.keys and k not in ("kafka", "pipeline"):
                self.findings.append(f"ConfigMap {src[1]}: `{k}` is not a spate config key (docs/flags.md)")
        return config

    def check_command(self):
        """`run`, then flags and SPATE_* variables spate has; no secret inline."""
        args = self.args
        if not args or args[0] != "run":
            self.bad("args must start with `run` (the image's ENTRYPOINT is spate)")
        for flag in self.flags.unknown_args(args[1:]):
            self.bad(f"{flag} is not a flag of `spate run` (docs/flags.md)")
        for v in self.c.get("env") or []:
            if v["name"].startswith("SPATE_") and v["name"] not in self.flags.env:
                self.bad(f"env {v['name']} is not a spate variable (docs/flags.md)")
            if v["name"] in INLINE_SECRET_ENV:
                self.bad(f"{v['name']} puts a secret in the environment; use a file")
        for a in args:
            if a.split("=", 1)[0] in INLINE_SECRETS:
                self.bad(f"{a.split('=', 1)[0]} puts a secret on the command line")
            if re.match(r"(-X|--property)?=?\s*sasl\.password=", a):
                self.bad("sasl.password on the command line; use --kafka-password-file")

    def check_secrets(self):
        """Every secret file spate reads is a file of a mounted Secret."""
        args = self.args
        paths = [(a.split("=", 1)[0], a.split("=", 1)[1]) for a in args
                 if "=" in a and a.split("=", 1)[0] in SECRET_FLAGS]
        paths += [(a, args[i + 1]) for i, a in enumerate(args) if a in SECRET_FLAGS and i + 1 < len(args)]
        paths += [(k, v) for k, v in self.config.items() if k in CONFIG_SECRET_KEYS]
        paths += [(k, v) for k, v in self.props.items() if k.endswith(".location") and k.startswith("ssl.")]
        if not paths:
            self.bad("no secret file passed (--password-file, --clickhouse-ca, ...)")
        for what, path in paths:
            src = self.files.get(path)
            if not src or src[0] != "secret":
                self.bad(f"{what} {path} is not a file of a mounted Secret")
        if "sasl.password" in self.props or "password" in self.config:
            self.bad("a password in the config or -X; use a password file")

    def check_probes(self):
        """Readiness on /readyz, liveness on /healthz, at the admin port,
        which listens beyond loopback."""
        c = self.c
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
        admin = self.value("admin-addr")
        if not admin:
            self.bad("no --admin-addr: no probes, no metrics")
        else:
            host, _, port = str(admin).rpartition(":")
            self.admin_port = int(port)
            if host in ("127.0.0.1", "localhost", "[::1]"):
                self.bad(f"--admin-addr {admin} is loopback; the kubelet cannot probe it")
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            get = (c.get(probe) or {}).get("httpGet")
            if not get:
                self.bad(f"{probe} is not an httpGet")
                continue
            if get.get("path") != path:
                self.bad(f"{probe} path {get.get('path')!r}, must be {path}")
            port = ports.get(get["port"], get["port"])
            if port != self.admin_port:
                self.bad(f"{probe} port {get['port']} is not the admin port {self.admin_port}")

    def check_security(self):
        psc, csc = self.pod.get("securityContext") or {}, self.c.get("securityContext") or {}
        if not csc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            self.bad("runAsNonRoot is not set")
        if csc.get("runAsUser", psc.get("runAsUser")) == 0:
            self.bad("runAsUser 0")
        if csc.get("readOnlyRootFilesystem") is not True:
            self.bad("readOnlyRootFilesystem is not true")
        if csc.get("allowPrivilegeEscalation") is not False:
            self.bad("allowPrivilegeEscalation is not false")
        if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
            self.bad("capabilities do not drop ALL")
        if (csc.get("capabilities") or {}).get("add"):
            self.bad("capabilities added")

    def check_shutdown(self):
        """SIGTERM's flush, drain and commit fit in the grace period."""
        try:
            shutdown = ref.parse_duration(self.value("shutdown-timeout"))
        except ValueError as err:
            self.bad(f"--shutdown-timeout: {err}")
            return
        if not self.grace > shutdown:
            self.bad(f"terminationGracePeriodSeconds {self.grace} is not above --shutdown-timeout {shutdown:g}s")

    def check_membership(self):
        """group.instance.id is the pod's name; the session outlasts a restart."""
        gid = self.props.get("group.instance.id")
        m = re.fullmatch(r"\$\((\w+)\)", gid or "")
        if not m:
            self.bad("no -X group.instance.id=$(VAR) (static membership)")
        else:
            var = [v for v in self.c.get("env") or [] if v["name"] == m.group(1)]
            field = var and ((var[0].get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if field != "metadata.name":
                self.bad(f"group.instance.id comes from {m.group(1)}, which is not the pod's metadata.name")
        session = self.props.get("session.timeout.ms")
        need_ms = (self.grace + RESTART_ALLOWANCE_S) * 1000
        if session is None or not str(session).isdigit() or int(session) < need_ms:
            self.bad(f"session.timeout.ms {session} does not outlast a restart "
                     f"(grace {self.grace}s + {RESTART_ALLOWANCE_S}s = {need_ms} ms)")

    def check_memory(self):
        """The memory limit holds the budget plus the documented overhead."""
        limit = ((self.c.get("resources") or {}).get("limits") or {}).get("memory")
        budget = self.value("max-buffered-bytes")
        try:
            need = ref.parse_bytes(budget) + ref.documented_overhead_bytes()
        except ValueError as err:
            self.bad(f"--max-buffered-bytes: {err}")
            return
        if limit is None:
            self.bad("no memory limit")
        elif quantity(limit) < need:
            self.bad(f"memory limit {limit} below --max-buffered-bytes {budget} "
                     f"+ documented overhead ({need >> 20} MiB)")

    def check_wiring(self):
        """The Service, the PDB and the ServiceMonitor reach these pods."""
        objs, ns, labels = self.objs, self.ns, self.labels
        svcs = [o for o in objs if o["kind"] == "Service" and o["metadata"].get("namespace") == ns
                and selects(o["spec"].get("selector"), labels)]
        if self.sts["spec"].get("serviceName") not in [s["metadata"]["name"] for s in svcs]:
            self.bad(f"serviceName {self.sts['spec'].get('serviceName')!r} is no Service selecting its pods")
        admin_ports = [p for s in svcs for p in s["spec"].get("ports") or []
                       if p.get("targetPort") in ("admin", self.admin_port) or p.get("port") == self.admin_port]
        if not admin_ports:
            self.bad("no Service port reaches the admin port")
        pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget" and o["metadata"].get("namespace") == ns
                and selects((o["spec"].get("selector") or {}).get("matchLabels"), labels)]
        if not pdbs:
            self.bad("no PodDisruptionBudget selects its pods")
        for sm in [o for o in objs if o["kind"] == "ServiceMonitor"]:
            sel = (sm["spec"].get("selector") or {}).get("matchLabels")
            hit = [s for s in svcs if selects(sel, s["metadata"].get("labels") or {})]
            names = {p.get("name") for s in hit for p in s["spec"].get("ports") or []}
            where = f"ServiceMonitor {sm['metadata']['name']}"
            if not hit:
                self.findings.append(f"{where}: selects no Service of StatefulSet {self.name}")
            for ep in sm["spec"].get("endpoints") or []:
                if ep.get("port") and ep["port"] not in names:
                    self.findings.append(f"{where}: port {ep['port']!r} is not a Service port name")


def check_statefulset(sts, objs, flags):
    """Every finding about one StatefulSet's spate pods."""
    if spate_container(sts) is None:
        return [f"StatefulSet {sts['metadata']['name']}: no container named spate"]
    m = Member(sts, objs, flags)
    for check in (m.check_command, m.check_secrets, m.check_probes, m.check_security,
                  m.check_shutdown, m.check_membership, m.check_memory, m.check_wiring):
        check()
    return m.findings


def quantity(q):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T|)", str(q))
    if not m:
        raise ValueError(f"{q!r} is not a memory quantity")
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
                                "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m.group(2)]


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
