#!/usr/bin/env python3
"""Check docker-compose.yml and the Dockerfile as far as a machine without a
Docker engine can:

    python3 deploy/compose_check.py              # exit 1 on any finding
    python3 deploy/compose_check.py --self-test  # prove each check can fail
    ... --spate target/release/spate             # also have spate read each command

docker-compose.yml: it parses (anchors and merge keys included); every file
or directory it mounts, reads as env_file or builds from exists in the
repository, or is one deploy/secure/make-certs.sh makes; every named volume
is declared, every depends_on a service, every build target a stage of its
Dockerfile; every spate container's command is a spate subcommand with
flags, SPATE_* variables and --config keys spate has (docs/flags.md).

Dockerfile: multi-stage, the binary stripped, a final stage with a numeric
non-root USER, ENTRYPOINT ["spate"], the admin port exposed and a
HEALTHCHECK that runs `spate probe` on /healthz at that port.

With --spate BIN, that spate reads every run/check command of the compose
file (--print-config) and the HEALTHCHECK's probe arguments.
"""
import copy
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tomllib

sys.dont_write_bytecode = True  # no __pycache__ in the work tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "kubernetes" / "test"))
import spate_reference as ref  # noqa: E402

try:
    import yaml
except ImportError:
    raise SystemExit("compose_check.py needs PyYAML: apt-get install python3-yaml (or pip install pyyaml)")

ROOT = ref.ROOT
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
MAKE_CERTS = ROOT / "deploy" / "secure" / "make-certs.sh"
GENERATED_DIR = "deploy/secure/certs"
SUBCOMMANDS = ("run", "check", "gen", "probe")


def generated_files():
    """The files make-certs.sh says it makes (its header lists them)."""
    names = set()
    for line in MAKE_CERTS.read_text().splitlines():
        m = re.match(r"#\s+(\S.*?)\s{2,}\S", line)
        if m:
            names.update(n.strip() for n in m.group(1).split(","))
    names.update(re.findall(r">\s*\"?([\w.-]+\.(?:secret|env|crt|key|p12|xml|conf|properties))", MAKE_CERTS.read_text()))
    return names


def repo_path(src, generated):
    """None when `src` (relative to the compose file) exists or is made by
    make-certs.sh, else why not."""
    rel = pathlib.PurePosixPath(src)
    path = (ROOT / rel).resolve()
    if path.exists():
        return None
    as_posix = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    if as_posix == GENERATED_DIR:
        return None
    if as_posix.startswith(GENERATED_DIR + "/") and pathlib.PurePosixPath(as_posix).name in generated:
        return None
    return f"{src} does not exist (and make-certs.sh does not make it)"


def spate_argv(svc):
    """The spate command line of a service running the spate image, or None."""
    command, entrypoint = svc.get("command"), svc.get("entrypoint")
    if isinstance(command, str):
        command = shlex.split(command)
    if entrypoint and entrypoint[:2] == ["/bin/sh", "-c"]:
        words = shlex.split(" ".join(command or []))
        if "spate" not in words:
            return None
        return words[words.index("spate") + 1:]
    if entrypoint:
        return None
    return list(command or [])


def runs_spate(svc, dockerfile_images):
    build = svc.get("build")
    if isinstance(build, dict) and build.get("dockerfile", "Dockerfile") == "Dockerfile":
        return True
    return svc.get("image") in dockerfile_images


def check_compose(compose, dockerfile_text, flags):
    e = []
    services = compose.get("services") or {}
    volumes = set((compose.get("volumes") or {}).keys())
    generated = generated_files()
    stages = set(re.findall(r"(?im)^FROM\s+\S+\s+AS\s+(\S+)", dockerfile_text))
    spate_images = {s.get("image") for s in services.values()
                    if isinstance(s.get("build"), dict) and s["build"].get("dockerfile", "Dockerfile") == "Dockerfile"}
    for name, svc in services.items():
        mounts = {}
        for v in svc.get("volumes") or []:
            if isinstance(v, dict):
                src, dst = v.get("source"), v.get("target")
            else:
                parts = v.split(":")
                src, dst = parts[0], parts[1] if len(parts) > 1 else parts[0]
            if src.startswith((".", "/")):
                why = repo_path(src, generated)
                if why:
                    e.append(f"{name}: volume {why}")
                mounts[dst] = src
            elif src not in volumes:
                e.append(f"{name}: named volume {src} is not declared under volumes:")
        env_files = svc.get("env_file") or []
        for f in [env_files] if isinstance(env_files, str) else env_files:
            why = repo_path(f if isinstance(f, str) else f["path"], generated)
            if why:
                e.append(f"{name}: env_file {why}")
        deps = svc.get("depends_on") or []
        for d in deps if isinstance(deps, list) else deps.keys():
            if d not in services:
                e.append(f"{name}: depends_on {d}, which is no service")
        build = svc.get("build")
        if isinstance(build, dict):
            if repo_path(build.get("context", "."), generated):
                e.append(f"{name}: build context {build.get('context')} does not exist")
            if not (ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).exists():
                e.append(f"{name}: build dockerfile {build.get('dockerfile')} does not exist")
            if build.get("target") and build["target"] not in stages:
                e.append(f"{name}: build target {build['target']} is not a stage of the Dockerfile")
        if not runs_spate(svc, spate_images):
            if str(svc.get("image", "")).startswith("spate:"):
                e.append(f"{name}: image {svc['image']} is built by no service")
            continue
        argv = spate_argv(svc)
        if argv is None:
            e.append(f"{name}: runs the spate image but not spate")
            continue
        sub = argv[0] if argv else None
        if sub not in SUBCOMMANDS:
            e.append(f"{name}: command {argv[:1]} is not a spate subcommand {SUBCOMMANDS}")
            continue
        known = flags[sub]
        for bad in known.unknown_args(argv[1:]):
            e.append(f"{name}: {bad} is not a flag of `spate {sub}` (docs/flags.md)")
        env = svc.get("environment") or {}
        env_names = env.keys() if isinstance(env, dict) else [x.split("=", 1)[0] for x in env]
        for var in env_names:
            if var.startswith("SPATE_") and var not in known.env:
                e.append(f"{name}: environment {var} is not a variable of `spate {sub}`")
        if "--config" in argv:
            path = argv[argv.index("--config") + 1]
            src = mounts.get(path)
            if src is None:
                e.append(f"{name}: --config {path} is not a mounted file")
            elif (ROOT / src).exists():
                config = tomllib.loads((ROOT / src).read_text())
                for k in config:
                    if k not in known.keys and k not in ("kafka", "pipeline"):
                        e.append(f"{name}: {src}: `{k}` is not a spate config key")
    return e


def spate_says(compose, dockerfile_text, spate):
    """With a spate binary: `--print-config` on every run/check command of
    the compose file (its --config mapped to the file mounted there, the
    service's environment), and the HEALTHCHECK's `spate probe` arguments
    parsed (exit 1, nothing listens, is fine; 2 is a usage error)."""
    e = []
    for name, svc in (compose.get("services") or {}).items():
        argv = spate_argv(svc) if str(svc.get("image", "")).startswith("spate:") else None
        if not argv or argv[0] not in ("run", "check"):
            continue
        mounts = {}
        for v in svc.get("volumes") or []:
            if isinstance(v, str) and v.startswith("."):
                src, dst = v.split(":")[:2]
                mounts[dst] = str(ROOT / src)
        argv = [mounts.get(a, a) for a in argv]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        raw = svc.get("environment") or {}
        env.update({k: str(v) for k, v in raw.items()} if isinstance(raw, dict) else
                   dict(x.split("=", 1) for x in raw if "=" in x))
        out = subprocess.run([spate, *argv, "--print-config"], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            e.append(f"{name}: spate {argv[0]} ... --print-config exits {out.returncode}: {out.stderr.strip()}")
    hc = re.search(r"(?ims)^HEALTHCHECK\s.*?CMD\s+(\[.*?\])", final_stage(dockerfile_text))
    if hc:
        cmd = yaml.safe_load(hc.group(1))
        if cmd[:2] == ["spate", "probe"]:
            out = subprocess.run([spate, *cmd[1:], "--timeout=1s"], capture_output=True, text=True)
            if out.returncode not in (0, 1):
                e.append(f"Dockerfile: HEALTHCHECK: spate {' '.join(cmd[1:])} exits {out.returncode}: "
                         f"{out.stderr.strip()}")
    return e


def final_stage(text):
    return re.split(r"(?im)^FROM\s", text)[-1]


def check_dockerfile(text, flags):
    e = []
    froms = re.findall(r"(?im)^FROM\s", text)
    if len(froms) < 2:
        e.append("Dockerfile: not multi-stage (build and run in one image)")
    if not re.search(r"CARGO_PROFILE_RELEASE_STRIP=symbols|\bstrip\b.*spate", text):
        e.append("Dockerfile: the release binary is not stripped")
    final = final_stage(text)
    user = re.search(r"(?im)^USER\s+(\S+)", final)
    if not user or not re.fullmatch(r"\d+(:\d+)?", user.group(1)) or user.group(1).split(":")[0] == "0":
        e.append(f"Dockerfile: the final stage's USER {user and user.group(1)!r} is not a numeric non-root uid")
    if not re.search(r'(?m)^ENTRYPOINT\s+\["spate"\]', final):
        e.append('Dockerfile: the final stage\'s ENTRYPOINT is not ["spate"]')
    exposed = set(re.findall(r"(?im)^EXPOSE\s+(\d+)", final))
    addr = re.search(r"SPATE_ADMIN_ADDR=\S+:(\d+)", final)
    if not addr or addr.group(1) not in exposed:
        e.append(f"Dockerfile: the admin port (SPATE_ADMIN_ADDR) is not EXPOSEd ({sorted(exposed)})")
    hc = re.search(r"(?ims)^HEALTHCHECK\s.*?CMD\s+(\[.*?\])", final)
    if not hc:
        e.append("Dockerfile: no HEALTHCHECK CMD [...] in the final stage")
    else:
        cmd = yaml.safe_load(hc.group(1))
        if cmd[:2] != ["spate", "probe"]:
            e.append(f"Dockerfile: HEALTHCHECK {cmd} does not run `spate probe`")
        for bad in flags["probe"].unknown_args(cmd[2:]):
            e.append(f"Dockerfile: HEALTHCHECK: {bad} is not a flag of `spate probe`")
        url = next((a.split("=", 1)[1] for a in cmd if a.startswith("--url=")), "")
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/healthz", url)
        if not m or m.group(1) not in exposed:
            e.append(f"Dockerfile: HEALTHCHECK url {url!r} is not /healthz on the exposed admin port")
    return e


def svc(c, name):
    return c["services"][name]


BREAKS = [
    ("a mounted file that is missing", lambda c, d: (svc(c, "prometheus")["volumes"].__setitem__(
        0, "./deploy/prometheus/nope.yml:/etc/prometheus/prometheus.yml:ro"), d)[1], "does not exist"),
    ("a generated file make-certs.sh does not make", lambda c, d: (svc(c, "spate-secure")["volumes"].append(
        "./deploy/secure/certs/other.pem:/x:ro"), d)[1], "make-certs.sh does not make it"),
    ("an undeclared named volume", lambda c, d: (c["volumes"].pop("prometheus-data"), d)[1], "is not declared"),
    ("depends_on a missing service", lambda c, d: (svc(c, "grafana").update(depends_on=["prometheus2"]), d)[1],
     "which is no service"),
    ("a flag spate run does not have", lambda c, d: (svc(c, "spate")["command"].append("--max-buffered-byte"), d)[1],
     "not a flag of `spate run`"),
    ("a flag spate gen does not have (in a shell command)", lambda c, d: (svc(c, "gen-secure").update(
        command=[svc(c, "gen-secure")["command"][0].replace("--count", "--counts")]), d)[1],
     "--counts is not a flag of `spate gen`"),
    ("a spate variable that does not exist", lambda c, d: (svc(c, "spate")["environment"].update(
        SPATE_BROKER="x"), d)[1], "SPATE_BROKER is not a variable"),
    ("not a subcommand", lambda c, d: (svc(c, "spate")["command"].__setitem__(0, "start"), d)[1],
     "not a spate subcommand"),
    ("a build target that is no stage", lambda c, d: (svc(c, "gen-secure")["build"].update(target="debug"), d)[1],
     "is not a stage"),
    ("an image nobody builds", lambda c, d: (svc(c, "gen").update(image="spate:other"), d)[1], "built by no service"),
    ("single-stage Dockerfile", lambda c, d: re.sub(r"(?m)^FROM .*AS (build|shell)\n", "", d), "not multi-stage"),
    ("binary not stripped", lambda c, d: d.replace("CARGO_PROFILE_RELEASE_STRIP=symbols", "X=1"), "not stripped"),
    ("root user", lambda c, d: d[:d.rindex("USER ")] + d[d.rindex("USER "):].replace("USER 10001:10001", "USER 0", 1),
     "numeric non-root"),
    ("named user", lambda c, d: d[:d.rindex("USER ")] + d[d.rindex("USER "):].replace("USER 10001:10001", "USER spate", 1),
     "numeric non-root"),
    ("entrypoint not spate", lambda c, d: d[:d.rindex("ENTRYPOINT")] + 'ENTRYPOINT ["/bin/sh"]\nCMD ["--help"]\n',
     "ENTRYPOINT is not"),
    ("admin port not exposed", lambda c, d: d.replace("EXPOSE 9187", "EXPOSE 8080"), "is not EXPOSEd"),
    ("healthcheck on /readyz", lambda c, d: d.replace("9187/healthz", "9187/readyz"), "is not /healthz"),
    ("healthcheck with a probe flag that does not exist", lambda c, d: d.replace('"--url=', '"--uri='),
     "is not a flag of `spate probe`"),
]


# Breaks only spate itself can see (with --spate): values it refuses.
SPATE_BREAKS = [
    ("an address spate cannot read", lambda c, d: (svc(c, "spate")["command"].__setitem__(
        svc(c, "spate")["command"].index("0.0.0.0:9187"), "0.0.0.0"), d)[1], "--print-config exits 2"),
    ("a bad SPATE_* value in the secure profile", lambda c, d: (svc(c, "spate-secure")["environment"].update(
        SPATE_FORMAT="yaml"), d)[1], "--print-config exits 2"),
    ("a probe URL spate refuses", lambda c, d: d.replace("http://127.0.0.1:9187/healthz", "https://127.0.0.1:9187/healthz"),
     "HEALTHCHECK: spate probe"),
]


def findings_of(compose, dockerfile, flags, spate):
    found = check_compose(compose, dockerfile, flags) + check_dockerfile(dockerfile, flags)
    return found + (spate_says(compose, dockerfile, spate) if spate else [])


def main():
    argv = sys.argv[1:]
    spate = argv[argv.index("--spate") + 1] if "--spate" in argv else None
    flags = {sub: ref.Flags(sub) for sub in SUBCOMMANDS}
    compose = yaml.safe_load(COMPOSE.read_text())
    dockerfile = DOCKERFILE.read_text()
    findings = findings_of(compose, dockerfile, flags, spate)
    if "--self-test" not in argv:
        for f in findings:
            print(f)
        print(f"docker-compose.yml ({len(compose['services'])} services) and Dockerfile: "
              f"{'ok' if not findings else f'{len(findings)} findings'}")
        sys.exit(1 if findings else 0)
    failures = [f"unbroken: {f}" for f in findings]
    caught = 0
    breaks = BREAKS + (SPATE_BREAKS if spate else [])
    for what, brk, expect in breaks:
        c = copy.deepcopy(compose)
        d = brk(c, dockerfile)
        found = findings_of(c, d, flags, spate)
        if any(expect in f for f in found):
            caught += 1
            print(f"  caught: {what}")
        else:
            failures.append(f"break not caught: {what} (wanted {expect!r}; got {found})")
    for f in failures:
        print(f"FAIL {f}")
    print(f"self-test: {caught} of {len(breaks)} breaks caught")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
