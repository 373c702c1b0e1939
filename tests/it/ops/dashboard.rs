//! Every metric the dashboard and the alert rules name is in the first scrape of a fresh
//! relay (dry run, in-process store, no request served yet), so no panel shows "No data"
//! and no `rate()` or absent-series alert waits for a first event on a new installation.
//!
//! The names are read from every PromQL expression of grafana/sealrelay-dashboard.json (all
//! panels, those nested in rows too, and the templating queries) and of grafana/alerts.yaml
//! (every `expr:` of every rule). A reference to `x_bucket`, `x_sum` or `x_count` needs that
//! exact sample name in the scrape (a histogram registered but never observed must still
//! render its buckets), and its family `x` must be typed a histogram (or a summary, for
//! `_sum`/`_count`). `tests/it/ops/telemetry_and_stop.rs` (`metrics_exist_at_zero_from_start_up`) checks chosen
//! label sets at zero; this test checks the names the operator's views depend on.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;
use serde_json::Value;

const DASHBOARD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/grafana/sealrelay-dashboard.json"
));
const ALERTS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/grafana/alerts.yaml"));

/// The metric names an expression refers to: identifiers `sealrelay_…` or `process_…`
/// outside string literals (so a label value or a regex never counts), not part of a longer
/// identifier or a recording rule's `level:metric:operations` name.
fn metric_names(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => {
                // Skip a string literal (backslash escapes, except in backticks).
                i += 1;
                while i < b.len() && b[i] != q {
                    if b[i] == b'\\' && q != b'`' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            c if ident(c) => {
                let start = i;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                let word = &expr[start..i];
                if !word.contains(':')
                    && (word.starts_with("sealrelay_") || word.starts_with("process_"))
                {
                    out.push(word.to_owned());
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// Every PromQL expression of the dashboard, with where it is (panel or variable), from
/// every `expr`, and from the `query`/`definition` of every templating variable: the whole
/// JSON is walked, so panels nested in collapsed rows are included.
fn dashboard_exprs(dash: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, title: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                let title = m
                    .get("title")
                    .or_else(|| m.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or(title);
                for (k, val) in m {
                    match (k.as_str(), val) {
                        ("expr" | "query" | "definition", Value::String(s)) => {
                            out.push((format!("dashboard {title:?} ({k})"), s.clone()))
                        }
                        _ => walk(val, title, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, title, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dash, "dashboard", &mut out);
    out
}

/// Every `expr:` of the rule file, with its rule's name: inline (`expr: up == 0`, quoted or
/// not) or a block scalar (`expr: |`, `>-`, …: the lines indented deeper than the key).
fn alert_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    let mut rule = String::from("?");
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let t = l.trim_start().trim_start_matches("- ");
        if let Some(name) = t
            .strip_prefix("alert:")
            .or_else(|| t.strip_prefix("record:"))
        {
            rule = name.trim().to_owned();
        }
        if let Some(rest) = t.strip_prefix("expr:") {
            let rest = rest.trim();
            if rest.starts_with('|') || rest.starts_with('>') {
                let key_indent = indent(l);
                let mut body = Vec::new();
                i += 1;
                while i < lines.len()
                    && (lines[i].trim().is_empty() || indent(lines[i]) > key_indent)
                {
                    body.push(lines[i].trim());
                    i += 1;
                }
                out.push((format!("alerts.yaml {rule}"), body.join("\n")));
                continue;
            }
            let rest = rest
                .strip_prefix('"')
                .and_then(|r| r.strip_suffix('"'))
                .or_else(|| rest.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
                .unwrap_or(rest);
            out.push((format!("alerts.yaml {rule}"), rest.to_owned()));
        }
        i += 1;
    }
    out
}

/// The scrape's sample names, and each family's `# TYPE`.
fn scrape(body: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut samples = BTreeSet::new();
    let mut types = BTreeMap::new();
    for l in body.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut f = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (f.next(), f.next()) {
                types.insert(name.to_owned(), kind.to_owned());
            }
        } else if !l.starts_with('#') && !l.trim().is_empty() {
            let end = l.find(['{', ' ']).unwrap_or(l.len());
            samples.insert(l[..end].to_owned());
        }
    }
    (samples, types)
}

/// A sample name's family and the types that may carry that suffix.
fn family(name: &str) -> (&str, &'static [&'static str]) {
    for (suffix, kinds) in [
        ("_bucket", &["histogram"][..]),
        ("_sum", &["histogram", "summary"][..]),
        ("_count", &["histogram", "summary"][..]),
    ] {
        if let Some(f) = name.strip_suffix(suffix) {
            return (f, kinds);
        }
    }
    (name, &[])
}

#[test]
fn the_name_parsers_find_what_promql_names() {
    assert_eq!(
        metric_names(
            r#"sum(rate(sealrelay_a_total{job=~"$job", x="sealrelay_not_me"}[5m])) / sealrelay:rule:rate5m + histogram_quantile(0.9, rate(sealrelay_b_seconds_bucket[1m])) or process_open_fds"#
        ),
        [
            "sealrelay_a_total",
            "sealrelay_b_seconds_bucket",
            "process_open_fds"
        ]
    );
    let rules = alert_exprs(
        "groups:\n  - name: g\n    rules:\n      - record: sealrelay:x:rate5m\n        expr: sum(rate(sealrelay_a_total[5m]))\n      - alert: A\n        expr: |\n          sealrelay_b\n            > 1\n        for: 5m\n        annotations:\n          description: sealrelay_not_an_expr\n      - alert: B\n        expr: \"sealrelay_c == 0\"\n",
    );
    assert_eq!(
        rules,
        [
            (
                "alerts.yaml sealrelay:x:rate5m".to_owned(),
                "sum(rate(sealrelay_a_total[5m]))".to_owned()
            ),
            ("alerts.yaml A".to_owned(), "sealrelay_b\n> 1".to_owned()),
            ("alerts.yaml B".to_owned(), "sealrelay_c == 0".to_owned()),
        ]
    );
    assert_eq!(family("x_seconds_bucket").0, "x_seconds");
    assert_eq!(family("x_requests_total").0, "x_requests_total");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_dashboard_and_alerts_name_exists_at_start_up() {
    let dash: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let mut exprs = dashboard_exprs(&dash);
    let dashboard_count = exprs.len();
    exprs.extend(alert_exprs(ALERTS));
    // The parsers found the expressions (a change of layout must not make this vacuous).
    assert!(
        dashboard_count >= 50,
        "only {dashboard_count} dashboard expressions"
    );
    assert!(
        exprs.len() - dashboard_count >= 40,
        "only {} alert rule expressions",
        exprs.len() - dashboard_count
    );
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (where_, e) in &exprs {
        for n in metric_names(e) {
            wanted.entry(n).or_default().insert(where_.clone());
        }
    }
    assert!(
        wanted.len() >= 30,
        "only {} names: {wanted:?}",
        wanted.len()
    );

    // A fresh relay: dry run (no APNs credentials), the in-process store, nothing served.
    let h = Harness::with(
        Options::default()
            .without_credentials()
            .var("RELAY_DRY_RUN", "true"),
    )
    .await;
    let body = h.admin("/metrics").await.body;
    let (mut samples, mut types) = scrape(&body);
    // The region families exist only with RELAY_REGION (their series are per peer): checked
    // on a second fresh relay that is one of two regions (its peer unreachable), and only
    // those names are taken from it.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("region.key");
    std::fs::write(&key, "k".repeat(32)).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let regional = Harness::with(
        Options::default()
            .without_credentials()
            .var("RELAY_DRY_RUN", "true")
            .var("RELAY_REGION", "eu")
            .var("RELAY_REGION_PEERS", "us=http://127.0.0.1:9")
            .var("RELAY_REGION_LISTEN", "127.0.0.1:0")
            .var("RELAY_REGION_KEY_FILE", &key.display().to_string()),
    )
    .await;
    let (regional_samples, regional_types) = scrape(&regional.admin("/metrics").await.body);
    samples.extend(
        regional_samples
            .into_iter()
            .filter(|n| n.starts_with("sealrelay_region_")),
    );
    types.extend(
        regional_types
            .into_iter()
            .filter(|(n, _)| n.starts_with("sealrelay_region_")),
    );

    let mut problems = Vec::new();
    for (name, wheres) in &wanted {
        let (fam, kinds) = family(name);
        let used_in = wheres.iter().cloned().collect::<Vec<_>>().join("; ");
        if !samples.contains(name) {
            problems.push(format!(
                "{name} is not in the start-up scrape (used in {used_in})"
            ));
        } else if !kinds.is_empty() && !types.get(fam).is_some_and(|k| kinds.contains(&k.as_str()))
        {
            problems.push(format!(
                "{name}: its family {fam} is typed {:?}, not {kinds:?} (used in {used_in})",
                types.get(fam)
            ));
        }
    }
    println!(
        "{} names from {} dashboard and {} alert expressions, checked against {} sample names at start-up",
        wanted.len(),
        dashboard_count,
        exprs.len() - dashboard_count,
        samples.len()
    );
    assert!(
        problems.is_empty(),
        "{} of {} names missing at start-up:\n  {}",
        problems.len(),
        wanted.len(),
        problems.join("\n  ")
    );
}
