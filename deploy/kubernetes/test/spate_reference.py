"""What spate accepts, read from the repository: the flags, SPATE_* variables
and config-file keys of `spate run` (docs/flags.md, generated from the flag
definitions), the metric names it registers (the Rust sources), and the
memory overhead docs/operations.md documents. Shared by the deployment
checks (deploy/kubernetes/test/check.py, deploy/compose_check.py).
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[3]


class Flags:
    """One subcommand's section of docs/flags.md."""

    def __init__(self, command="run"):
        text = (ROOT / "docs" / "flags.md").read_text()
        start = text.index(f"## `spate {command}`")
        end = text.find("\n## `spate ", start + 1)
        section = text[start:] if end < 0 else text[start:end]
        if command == "check":
            # "Every flag of `spate run`, and:" then its own
            run = Flags("run")
            self.long, self.short = set(run.long), set(run.short)
            self.env, self.keys, self.defaults = set(run.env), set(run.keys), dict(run.defaults)
        else:
            self.long, self.short, self.env, self.keys, self.defaults = set(), set(), set(), set(), {}
        for block in re.split(r"\n### ", section)[1:]:
            heading = block.split("\n", 1)[0]
            m = re.match(r"`(?:-(\w), )?--([a-z0-9-]+)", heading)
            if not m:
                continue
            if m.group(1):
                self.short.add(m.group(1))
            flag = m.group(2)
            self.long.add(flag)
            env = re.search(r"- environment: `(SPATE_[A-Z0-9_]+)`", block)
            if env:
                self.env.add(env.group(1))
            key = re.search(r"- config file: `([a-z0-9_]+)`", block)
            if key:
                self.keys.add(key.group(1))
            default = re.search(r"- default: `([^`]*)`", block)
            if default:
                self.defaults[flag] = default.group(1)
        if not self.long:
            raise SystemExit(f"docs/flags.md: no flags found for `spate {command}`")

    def unknown_args(self, args):
        """The flags in an argument list that `spate run` does not have."""
        bad = []
        for a in args:
            if a.startswith("--"):
                name = a[2:].split("=", 1)[0]
                if name and name not in self.long:
                    bad.append(a)
            elif a.startswith("-") and len(a) > 1 and not a[1].isdigit():
                if a[1] not in self.short:
                    bad.append(a)
        return bad


def metric_names():
    """Every "spate_..." name the Rust sources spell out (metrics are
    registered by their full name as a string literal)."""
    names = set()
    for base in ("spate_core/src", "connectors", "src"):
        for path in (ROOT / base).rglob("*.rs"):
            names.update(re.findall(r'"(spate_[a-z0-9_]+)"', path.read_text()))
    return names


def documented_overhead_bytes():
    """The memory spate uses past --max-buffered-bytes, as docs/operations.md
    states it ("within the budget plus N MiB")."""
    text = (ROOT / "docs" / "operations.md").read_text()
    m = re.search(r"within the budget\s+plus\s+(\d+)\s*MiB", text)
    if not m:
        raise SystemExit('docs/operations.md: no "within the budget plus N MiB" sentence')
    return int(m.group(1)) << 20


def parse_bytes(s):
    """spate's size syntax (src/units.rs): 256MiB, 512K, 1G, 1048576."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(s))
    if not m:
        raise ValueError(f"{s!r} is not a size")
    mult = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
            "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
            "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}[m.group(2).lower()]
    return int(m.group(1)) * mult


def parse_duration(s):
    """spate's duration syntax (src/units.rs), in seconds."""
    m = re.fullmatch(r"\s*([\d.]+)\s*(ms|s|m|min|h|)\s*", str(s))
    if not m:
        raise ValueError(f"{s!r} is not a duration")
    return float(m.group(1)) * {"ms": 0.001, "": 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
