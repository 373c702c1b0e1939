//! The crate's layering, checked from the source: imports between top-level modules form no
//! cycle, the leaves (`device`, `metrics`, `secret`, `clock`, `body`) import nothing of the crate,
//! and no component imports `config` (configuration depends on components, never the other
//! way round; only the wiring in `app` and the binary read it).
//!
//! Every reference counts, test code included: `crate::x`, `use crate::{x, y::z}`, and paths
//! inside `pub use`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`None` for lib.rs and main.rs).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    match first.as_str() {
        "lib.rs" | "main.rs" => None,
        f => Some(f.trim_end_matches(".rs").to_owned()),
    }
}

/// The top-level modules a file's code refers to through `crate::` (comments, doc links
/// included, are not imports and are skipped).
fn references(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let text = code.as_str();
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in text.match_indices("crate::") {
        // `sealrelay_testkit::` and the like are other crates.
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // use crate::{a, b::c, d::{e, f}}: the first segment of each top-level item.
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_ascii_alphabetic() || c == '_') => {
                        out.insert(ident(&group[j..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let Some(m) = module_of(src, &f) else {
            continue;
        };
        let text = std::fs::read_to_string(&f).unwrap();
        let refs = references(&text);
        let entry = g.entry(m.clone()).or_default();
        entry.extend(refs.into_iter().filter(|r| *r != m));
    }
    g
}

/// A cycle through `start`, if any (depth-first).
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_owned());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, m, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for n in g.keys() {
        if let Some(c) = visit(g, n, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_reference_parser_reads_groups_and_paths() {
    let r = references(
        "use crate::{device::hex, store::{Store, queue::X}, metrics};\nlet x = crate::policy::f();\nother_crate::no::x();\n/// see [`crate::v1`]\nlet y = 1; // crate::app",
    );
    let want: BTreeSet<String> = ["device", "store", "metrics", "policy"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(r, want);
}

#[test]
fn the_module_graph_has_no_cycle() {
    let g = graph();
    assert!(g.len() >= 12, "modules found: {:?}", g.keys());
    if let Some(c) = cycle(&g) {
        panic!("import cycle: {}\ngraph: {g:#?}", c.join(" -> "));
    }
    // A deliberately cyclic graph is found, so the check can fail.
    let mut bad = g.clone();
    bad.entry("device".into()).or_default().insert("v1".into());
    assert!(cycle(&bad).is_some());
}

#[test]
fn leaves_import_nothing_of_the_crate() {
    let g = graph();
    for leaf in ["device", "metrics", "secret", "clock", "body"] {
        assert_eq!(
            g.get(leaf).cloned().unwrap_or_default(),
            BTreeSet::new(),
            "{leaf} must be a leaf"
        );
    }
}

/// The configuration is read by the wiring (`app`) and by the command line (`cli`), which
/// declares one flag per variable of `config::VARS` for the server's commands; every
/// other module is handed the settings it needs.
#[test]
fn only_the_wiring_reads_the_configuration() {
    let g = graph();
    for (m, refs) in &g {
        if !["app", "config", "cli"].contains(&m.as_str()) {
            assert!(!refs.contains("config"), "{m} imports config: {refs:?}");
        }
    }
}
