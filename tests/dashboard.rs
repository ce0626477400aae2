//! The Grafana dashboard (`deploy/grafana/dashboards/spate.json`) and its
//! docker-compose wiring, checked without any services:
//!
//! - every metric a dashboard query names is one spate exports
//!   (`spate_core::metrics::METRIC_NAMES` and the ClickHouse connector's
//!   `spate_clickhouse::metrics::METRIC_NAMES`, histogram series included);
//! - the dashboard covers the metrics external alerts depend on;
//! - Grafana's dashboard provider reads the directory compose mounts the
//!   dashboard into, and Prometheus scrapes the port the compose `spate`
//!   service serves `--admin-addr` on.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::LazyLock;

/// Every family the binary exports: the runtime's and the ClickHouse
/// connector's (registered on the same registry).
static METRIC_NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    (spate_core::metrics::METRIC_NAMES.iter())
        .chain(spate_core::policy::POLICY_METRIC_NAMES)
        .chain(spate_clickhouse::metrics::METRIC_NAMES)
        .copied()
        .collect()
});

const DASHBOARD: &str = "deploy/grafana/dashboards/spate.json";
const DASHBOARD_PROVIDER: &str = "deploy/grafana/provisioning/dashboards/spate.yml";
const DATASOURCE: &str = "deploy/grafana/provisioning/datasources/prometheus.yml";
const PROMETHEUS: &str = "deploy/prometheus/prometheus.yml";
const COMPOSE: &str = "docker-compose.yml";

/// Series a Prometheus histogram family exposes besides its name.
const HISTOGRAM_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];

/// Metrics the dashboard must show (external alerts depend on the first five).
const REQUIRED: &[&str] = &[
    "spate_messages_consumed_total",
    "spate_rows_inserted_total",
    "spate_committed_offset",
    "spate_consumer_lag",
    "spate_lanes_paused",
    "spate_insert_duration_seconds",
    "spate_insert_errors_total",
];

fn read(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// One PromQL query and where it comes from (a panel title or a variable).
struct Query {
    source: String,
    expr: String,
}

/// Every panel, rows' nested panels included, depth first.
fn walk_panels<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
    for panel in panels.as_array().into_iter().flatten() {
        out.push(panel);
        walk_panels(&panel["panels"], out);
    }
}

fn all_panels(dash: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    walk_panels(&dash["panels"], &mut out);
    out
}

fn title(panel: &Value) -> String {
    panel["title"].as_str().unwrap_or("<untitled>").to_string()
}

/// Every `expr` of every panel target, plus the queries of query variables.
fn queries(dash: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    for panel in all_panels(dash) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push(Query {
                    source: format!("panel {:?}", title(panel)),
                    expr: expr.to_string(),
                });
            }
        }
    }
    for var in dash["templating"]["list"].as_array().into_iter().flatten() {
        if var["type"] != "query" {
            continue;
        }
        let source = format!("variable ${}", var["name"].as_str().unwrap_or("?"));
        // `query` is a string in older dashboards, an object in newer ones.
        for q in [&var["query"], &var["query"]["query"], &var["definition"]] {
            if let Some(expr) = q.as_str() {
                out.push(Query {
                    source: source.clone(),
                    expr: expr.to_string(),
                });
            }
        }
    }
    out
}

/// The metric-like identifiers (`spate_...`) a PromQL expression mentions.
fn spate_identifiers(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|token| token.starts_with("spate_"))
        .map(str::to_string)
        .collect()
}

/// The exported family a series name belongs to: the name itself, or a
/// histogram's `_bucket`/`_sum`/`_count` series. Counters (`*_total`) are
/// not histograms, so `spate_x_total_count` is not accepted.
fn family_of(series: &str) -> Option<&'static str> {
    if let Some(name) = METRIC_NAMES.iter().find(|n| **n == series) {
        return Some(name);
    }
    HISTOGRAM_SUFFIXES.iter().find_map(|suffix| {
        let base = series.strip_suffix(suffix)?;
        METRIC_NAMES
            .iter()
            .find(|n| **n == base && !n.ends_with("_total"))
            .copied()
    })
}

#[test]
fn dashboard_is_a_grafana_dashboard() {
    let dash = dashboard();
    assert_eq!(dash["uid"], "spate", "dashboard uid");
    assert_eq!(dash["title"], "spate", "dashboard title");
    assert!(
        dash["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion: {}",
        dash["schemaVersion"]
    );
    assert!(dash["id"].is_null(), "provisioned dashboards carry no id");

    let vars = dash["templating"]["list"]
        .as_array()
        .expect("templating.list");
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a $datasource variable of type prometheus"
    );

    let want_ds = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    let mut ids = BTreeSet::new();
    let mut problems = Vec::new();
    for panel in all_panels(&dash) {
        let t = title(panel);
        match panel["id"].as_u64() {
            Some(id) if ids.insert(id) => {}
            _ => problems.push(format!("{t:?}: missing or duplicate id {}", panel["id"])),
        }
        for key in ["x", "y", "w", "h"] {
            if panel["gridPos"][key].as_u64().is_none() {
                problems.push(format!("{t:?}: gridPos.{key}"));
            }
        }
        if panel["type"] == "row" {
            continue;
        }
        if panel["datasource"] != want_ds {
            problems.push(format!("{t:?}: datasource {}", panel["datasource"]));
        }
        let targets = panel["targets"].as_array().map_or(&[][..], Vec::as_slice);
        if targets.is_empty() {
            problems.push(format!("{t:?}: no targets"));
        }
        for target in targets {
            if target["datasource"] != want_ds {
                problems.push(format!("{t:?}: target datasource {}", target["datasource"]));
            }
            if target["expr"].as_str().is_none_or(|e| e.trim().is_empty()) {
                problems.push(format!("{t:?}: target without expr"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "dashboard problems:\n{}",
        problems.join("\n")
    );
}

#[test]
fn dashboard_queries_name_only_exported_metrics() {
    let dash = dashboard();
    let queries = queries(&dash);
    assert!(!queries.is_empty(), "no queries found in {DASHBOARD}");

    // unknown series -> where they are used
    let mut unknown: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut used_bare = BTreeMap::<&str, BTreeSet<String>>::new();
    let mut histograms = BTreeSet::new();
    for q in &queries {
        for series in spate_identifiers(&q.expr) {
            match family_of(&series) {
                Some(family) if family == series => {
                    used_bare
                        .entry(family)
                        .or_default()
                        .insert(q.source.clone());
                }
                Some(family) => {
                    histograms.insert(family);
                }
                None => {
                    unknown.entry(series).or_default().insert(q.source.clone());
                }
            }
        }
    }
    let report: Vec<String> = unknown
        .iter()
        .map(|(name, sources)| {
            format!(
                "  {name}: {}",
                sources.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "{DASHBOARD} queries metrics spate does not export (not in METRIC_NAMES):\n{}",
        report.join("\n")
    );

    // A histogram family has no series of its bare name.
    let bare_histograms: Vec<String> = histograms
        .iter()
        .filter_map(|h| {
            let sources = used_bare.get(h)?.iter().cloned().collect::<Vec<_>>();
            Some(format!("  {h}: {}", sources.join(", ")))
        })
        .collect();
    assert!(
        bare_histograms.is_empty(),
        "histograms queried without _bucket/_sum/_count:\n{}",
        bare_histograms.join("\n")
    );
}

#[test]
fn dashboard_covers_alerted_metrics() {
    let dash = dashboard();
    let used: BTreeSet<&str> = queries(&dash)
        .iter()
        .flat_map(|q| spate_identifiers(&q.expr))
        .filter_map(|s| family_of(&s))
        .collect();
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|m| !used.contains(m))
        .collect();
    assert!(missing.is_empty(), "{DASHBOARD} shows none of: {missing:?}");
    for name in REQUIRED {
        assert!(METRIC_NAMES.contains(name), "{name} is no longer exported");
    }
}

/// The lines of a top-level compose service (`  name:` up to the next
/// line at the same or a lower indentation).
fn compose_service<'a>(compose: &'a str, name: &str) -> Vec<&'a str> {
    let header = format!("  {name}:");
    let mut lines = compose.lines();
    lines
        .by_ref()
        .find(|l| {
            l.strip_prefix(&header)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
        .unwrap_or_else(|| panic!("{COMPOSE}: no service {name}"));
    lines
        .take_while(|l| {
            let t = l.trim_start();
            t.is_empty() || t.starts_with('#') || l.len() - t.len() > 2
        })
        .collect()
}

/// `host:container[:mode]` volume mappings of a compose service.
fn compose_mounts(service: &[&str]) -> Vec<(String, String)> {
    service
        .iter()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|v| v.trim().trim_matches('"'))
        .filter(|v| v.starts_with("./"))
        .map(|v| {
            let mut parts = v.split(':');
            let host = parts.next().unwrap_or_default();
            let container = parts.next().unwrap_or_default();
            (
                host.trim_end_matches('/').to_string(),
                container.trim_end_matches('/').to_string(),
            )
        })
        .collect()
}

/// Values of `key: value` lines in a small YAML file.
fn yaml_values(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_string())
        .collect()
}

#[test]
fn grafana_provisioning_matches_compose() {
    let compose = read(COMPOSE);
    let grafana = compose_service(&compose, "grafana");
    let mounts = compose_mounts(&grafana);
    let mount_of = |host: &str| {
        mounts
            .iter()
            .find(|(h, _)| h == host)
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| panic!("{COMPOSE}: grafana does not mount {host}: {mounts:?}"))
    };
    assert_eq!(
        mount_of("./deploy/grafana/provisioning"),
        "/etc/grafana/provisioning"
    );
    let dashboards_dir = mount_of("./deploy/grafana/dashboards");
    assert!(
        DASHBOARD
            .strip_prefix("deploy/grafana/dashboards/")
            .is_some(),
        "{DASHBOARD} lives in the mounted directory"
    );

    let provider = read(DASHBOARD_PROVIDER);
    let paths = yaml_values(&provider, "path");
    assert!(
        !paths.is_empty() && paths.iter().all(|p| p.trim_end_matches('/') == dashboards_dir),
        "{DASHBOARD_PROVIDER}: path {paths:?}, but compose mounts the dashboards at {dashboards_dir}"
    );
    assert_eq!(
        yaml_values(&provider, "type"),
        ["file"],
        "{DASHBOARD_PROVIDER}: provider type"
    );

    // The home dashboard, when set, is the mounted spate.json.
    for home in grafana.iter().filter_map(|l| {
        l.trim()
            .strip_prefix("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH:")
    }) {
        assert_eq!(home.trim(), format!("{dashboards_dir}/spate.json"));
    }

    // The datasource is the compose prometheus service, of the type the
    // dashboard's $datasource variable selects.
    let datasource = read(DATASOURCE);
    assert_eq!(
        yaml_values(&datasource, "type"),
        ["prometheus"],
        "{DATASOURCE}: type"
    );
    let prometheus = compose_service(&compose, "prometheus");
    assert!(
        prometheus.iter().any(|l| l.contains("\"9090:9090\"")),
        "{COMPOSE}: prometheus publishes 9090"
    );
    assert_eq!(
        yaml_values(&datasource, "url"),
        ["http://prometheus:9090"],
        "{DATASOURCE}: url"
    );
}

#[test]
fn prometheus_scrapes_spates_admin_port() {
    let compose = read(COMPOSE);
    let spate = compose_service(&compose, "spate").join("\n");
    // `"--admin-addr", "ADDR"` in the command, or SPATE_ADMIN_ADDR: ADDR.
    let addr = if let Some((_, rest)) = spate.split_once("\"--admin-addr\"") {
        rest.split('"').nth(1).map(str::to_string)
    } else {
        yaml_values(&spate, "SPATE_ADMIN_ADDR").into_iter().next()
    }
    .unwrap_or_else(|| panic!("{COMPOSE}: the spate service sets no --admin-addr"));
    let addr: SocketAddr = addr
        .parse()
        .unwrap_or_else(|e| panic!("{COMPOSE}: --admin-addr {addr}: {e}"));
    assert!(
        addr.ip().is_unspecified(),
        "{COMPOSE}: --admin-addr {addr} must listen on all interfaces for Prometheus to reach it"
    );
    let target = format!("\"spate:{}\"", addr.port());

    let prometheus = read(PROMETHEUS);
    assert!(
        prometheus
            .lines()
            .any(|l| l.contains("targets:") && l.contains(&target)),
        "{PROMETHEUS}: no scrape target {target} (spate's --admin-addr is {addr})"
    );
    assert!(
        yaml_values(&prometheus, "scrape_interval")
            .iter()
            .all(|v| v == "5s"),
        "{PROMETHEUS}: scrape every 5s"
    );
    let prom_service = compose_service(&compose, "prometheus");
    assert!(
        compose_mounts(&prom_service)
            .iter()
            .any(|(h, c)| h == "./deploy/prometheus/prometheus.yml"
                && c == "/etc/prometheus/prometheus.yml"),
        "{COMPOSE}: prometheus mounts {PROMETHEUS} as its configuration"
    );
}

#[test]
fn identifiers_and_histogram_series_are_recognised() {
    assert_eq!(
        spate_identifiers(
            r#"histogram_quantile(0.99, sum by (le) (rate(spate_insert_duration_seconds_bucket{instance=~"$i"}[1m])))"#
        ),
        ["spate_insert_duration_seconds_bucket"]
    );
    assert_eq!(
        family_of("spate_insert_duration_seconds_bucket"),
        Some("spate_insert_duration_seconds")
    );
    assert_eq!(family_of("spate_consumer_lag"), Some("spate_consumer_lag"));
    assert_eq!(family_of("spate_consumer_lagg"), None);
    assert_eq!(family_of("spate_rows_inserted_total_count"), None);
}
