#!/usr/bin/env python3
"""Check the Kubernetes manifests under deploy/kubernetes, offline.

    python3 deploy/kubernetes/test/check.py              # check; exit 1 on any finding
    python3 deploy/kubernetes/test/check.py --self-test  # prove each check can fail
    ... --spate target/release/spate                    # also run spate --print-config on each pod's command line
    ... --promtool promtool                             # also promtool check/test the alerts (alerts.test.yaml)

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

Beside it: k8s_schema.py (the schema validation), crds.py (the custom
resources), pods.py (spate's pods, and --spate), breaks.py (the self-test's
breaks), spate_reference.py (flags, variables, keys and metric names read
from the repository), vendor_schemas.py (regenerates schemas/).
"""
import copy
import pathlib
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the work tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import spate_reference as ref  # noqa: E402
from breaks import BREAKS, PROMTOOL_BREAKS, SPATE_BREAKS  # noqa: E402
from crds import (  # noqa: E402
    check_alerts_with_promtool, check_prometheusrule, check_scaledobject, check_servicemonitor,
    check_triggerauth, promtool)
from k8s_schema import Schemas  # noqa: E402
from pods import check_statefulset, print_config  # noqa: E402

try:
    import yaml
except ImportError:
    raise SystemExit("check.py needs PyYAML: apt-get install python3-yaml (or pip install pyyaml)")

KUBE = pathlib.Path(__file__).resolve().parent.parent
TARGETS = {
    "deploy/kubernetes": KUBE,
    "base": KUBE / "base",
    "examples/production": KUBE / "examples" / "production",
}


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


# ---- the whole check -------------------------------------------------------

class Context:
    """What the checks read: the vendored schemas, spate's flags and metric
    names from the repository, and the optional tools (a spate binary for
    --print-config, promtool for the alerts' tests)."""

    def __init__(self, spate=None, promtool_exe=None):
        self.schemas, self.flags, self.metrics = Schemas(), ref.Flags("run"), ref.metric_names()
        self.spate, self.promtool = spate, promtool_exe


def check(rendered, ctx):
    """Findings for every rendered target: {target: [message, ...]}."""
    findings = {}
    for target, objs in rendered.items():
        e = []
        for o in objs:
            kind = o.get("kind")
            where = f"{kind} {o.get('metadata', {}).get('name')}"
            if kind == "ServiceMonitor":
                e += check_servicemonitor(o)
            elif kind == "PrometheusRule":
                e += check_prometheusrule(o, ctx.metrics)
            elif kind == "ScaledObject":
                e += check_scaledobject(o, objs)
            elif kind == "TriggerAuthentication":
                e += check_triggerauth(o)
            else:
                e += [f"{where}: schema: {x}" for x in ctx.schemas.validate(o)]
        stss = [o for o in objs if o.get("kind") == "StatefulSet"]
        if not stss:
            e.append("no StatefulSet rendered")
        for s in stss:
            if "spec" in s and "template" in s["spec"]:
                e += check_statefulset(s, objs, ctx.flags)
                if ctx.spate:
                    e += print_config(ctx.spate, s, objs)
        for kind in ("Service", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"):
            if not any(o.get("kind") == kind for o in objs):
                e.append(f"no {kind} rendered")
        if ctx.promtool:
            e += check_alerts_with_promtool(ctx.promtool, objs)
        findings[target] = e
    return findings


def self_test(rendered, ctx):
    base = check(rendered, ctx)
    failures = [f"unbroken {t}: {x}" for t, xs in base.items() for x in xs]
    caught = 0
    breaks = BREAKS + (SPATE_BREAKS if ctx.spate else []) + (PROMTOOL_BREAKS if ctx.promtool else [])
    # each break checked with the tools it needs only: promtool is slow
    names_only = copy.copy(ctx)
    names_only.spate = names_only.promtool = None
    with_spate = copy.copy(names_only)
    with_spate.spate = ctx.spate
    for target, what, brk, expect in breaks:
        objs = copy.deepcopy(rendered[target])
        brk(objs)
        tools = ctx if (target, what, brk, expect) in PROMTOOL_BREAKS else (
            with_spate if (target, what, brk, expect) in SPATE_BREAKS else names_only)
        found = check({target: objs}, tools)[target]
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

    def option(name):
        return argv[argv.index(name) + 1] if name in argv else None

    ctx = Context(option("--spate"), promtool(option("--promtool")) if "--promtool" in argv else None)
    rendered = {t: render(p) for t, p in TARGETS.items()}
    if "--self-test" in argv:
        sys.exit(0 if self_test(rendered, ctx) else 1)
    findings = check(rendered, ctx)
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
