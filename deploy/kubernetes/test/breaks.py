"""The deliberate breaks check.py --self-test applies to copies of the
rendered objects: (target, what it breaks, the break, a substring the
finding meant to catch it must contain). SPATE_BREAKS are values only spate
itself refuses (check.py --spate), PROMTOOL_BREAKS what only the alerts'
tests see (check.py --promtool).
"""
from crds import PARTITIONS_ANNOTATION
from pods import spate_container


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


def set_expr(objs, alert, old, new):
    rule = next(r for r in rules(objs) if r["alert"] == alert)
    assert old in rule["expr"], old
    rule["expr"] = rule["expr"].replace(old, new)


# Breaks only the alerts' tests catch (with --promtool).
PROMTOOL_BREAKS = [
    ("base", "an alert expression that does not parse",
     lambda o: set_expr(o, "SpateConsumerLagGrowing", "sum by (namespace, topic) (spate", "sum by (namespace, topic (spate"),
     "could not parse expression"),
    ("base", "stalled-shard alert blind to a shard that never inserted",
     lambda o: set_expr(o, "SpateShardStalled", "unless on", "and on"),
     'promtool test rules alerts.test.yaml failed:\nUnit Testing:  alerts.test.yaml'),
    ("base", "a lag threshold no lag reaches",
     lambda o: set_expr(o, "SpateConsumerLagGrowing", "> 100000", "> 100000000"),
     'exp: {__name__="ALERTS", alertname="SpateConsumerLagGrowing"'),
    ("base", "the dead-letter alert counting tombstones",
     lambda o: set_expr(o, "SpateDeadLetters", ', reason!="tombstone"', ""),
     'got: {__name__="ALERTS", alertname="SpateDeadLetters"'),
]
