"""Checks of the custom resources the manifests use, whose CRDs belong to
the Prometheus operator and KEDA: apiVersion, kind, the fields their
controllers require, and how they fit spate (alerts on metrics spate
exports, KEDA on spate's own group and capped at the partition count).
"""
import pathlib
import re
import shutil
import subprocess
import tempfile
import tomllib

import yaml

ALERT_TESTS = pathlib.Path(__file__).resolve().parent / "alerts.test.yaml"

REQUIRED_ALERTS = {
    "SpateConsumerLagGrowing": "lag growing",
    "SpateShardStalled": "stalled shard",
    "SpateRejectedRatioHigh": "rejected ratio",
    "SpateDeadLetters": "dead letters",
    "SpateMemberNotReady": "member not ready",
}
PARTITIONS_ANNOTATION = "spate.dev/topic-partitions"


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


def promtool(path):
    exe = shutil.which(path)
    if not exe:
        raise SystemExit(f"check.py: {path} not found: the alerts' tests need promtool "
                         "(Debian package prometheus; scripts/prereqs.sh installs it)")
    return exe


def check_alerts_with_promtool(exe, objs):
    """`promtool check rules` on the rendered PrometheusRules' groups, then
    `promtool test rules` with alerts.test.yaml: each alert fires on its
    failure and not on a healthy series."""
    groups = [g for o in objs if o["kind"] == "PrometheusRule" for g in (o.get("spec") or {}).get("groups") or []]
    if not groups:
        return []
    e = []
    with tempfile.TemporaryDirectory(prefix="spate-alerts-") as tmp:
        (pathlib.Path(tmp) / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
        shutil.copy(ALERT_TESTS, pathlib.Path(tmp) / "alerts.test.yaml")
        for cmd in (["check", "rules", "rules.yaml"], ["test", "rules", "alerts.test.yaml"]):
            out = subprocess.run([exe, *cmd], cwd=tmp, capture_output=True, text=True)
            if out.returncode != 0:
                text = (out.stdout + out.stderr).strip().replace(tmp, "")
                e.append(f"PrometheusRule: promtool {' '.join(cmd)} failed:\n{text}")
                break
    return e
