//! The crate's layering, checked from the source: imports between top-level modules form no
//! cycle, the leaves (`device`, `metrics`, `secret`, `clock`, `body`) import nothing of the crate,
//! and no component imports `config` (configuration depends on components, never the other
//! way round; only the wiring in `app` and the binary read it). Inside every module with
//! children the same holds one level down: no circle among the children, and none climbs
//! back to an item of its parent's own file.
//!
//! Every reference counts, test code included: `crate::x`, `use crate::{x, y::z}`, and paths
//! inside `pub use`.
//!
//! A feature's rules live beside it as plain types and pure functions (the receipt
//! lifecycle in `signed/receipt/lifecycle.rs`, the mailbox in `mailbox/state.rs`): each such module ([`RULES`]) is a node of its
//! own, imports nothing of the crate but the leaves and modules that import only leaves, and
//! may be used by any module, the
//! store's backends included, without that use counting as an import of its feature.

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

/// A feature's rules, each a node of the graph: its path from the crate root.
const RULES: &[&str] = &[
    "signed::receipt::lifecycle",
    "signed::enrolment",
    "mailbox::state",
];

/// The leaves: modules that import nothing of the crate.
const LEAVES: &[&str] = &["device", "metrics", "secret", "clock", "body"];

/// The rules module a file belongs to (by its path under `src/`), if any.
fn rules_of(rel: &Path) -> Option<&'static str> {
    let path = rel.with_extension("");
    let path: Vec<&str> = path.iter().filter_map(|c| c.to_str()).collect();
    // The rules module's own file, or a file of its folder.
    RULES.iter().copied().find(|r| {
        let rule: Vec<&str> = r.split("::").collect();
        path.len() >= rule.len() && path[..rule.len()] == rule[..]
    })
}

/// The top-level module a source file belongs to (`None` for lib.rs and main.rs), or the
/// rules module it is.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    if let Some(r) = rules_of(rel) {
        return Some(r.to_owned());
    }
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    match first.as_str() {
        "lib.rs" | "main.rs" => None,
        f => Some(f.trim_end_matches(".rs").to_owned()),
    }
}

/// The top-level modules a file's code refers to through `crate::` (comments, doc links
/// included, are not imports and are skipped); a path into a rules module ([`RULES`])
/// written out in full (`crate::signed::receipt::lifecycle::X`) refers to that module.
fn references(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut text = text.to_owned();
    for r in RULES {
        let full = format!("crate::{r}");
        if text.contains(&full) {
            out.insert((*r).to_owned());
            text = text.replace(&full, "");
        }
    }
    out.extend(top_level_references(&text));
    out
}

fn top_level_references(text: &str) -> BTreeSet<String> {
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
    for leaf in LEAVES {
        assert_eq!(
            g.get(*leaf).cloned().unwrap_or_default(),
            BTreeSet::new(),
            "{leaf} must be a leaf"
        );
    }
}

#[test]
fn rules_import_only_leaves() {
    let g = graph();
    // What a rules module may use: the leaves, and modules that themselves import only
    // leaves (`policy`'s pure bucket arithmetic).
    let pure = |m: &str| {
        LEAVES.contains(&m)
            || g.get(m)
                .is_some_and(|refs| refs.iter().all(|r| LEAVES.contains(&r.as_str())))
    };
    for r in RULES {
        let refs = g
            .get(*r)
            .unwrap_or_else(|| panic!("{r} is not in the source"));
        let beyond: Vec<&String> = refs.iter().filter(|m| !pure(m)).collect();
        assert!(
            beyond.is_empty(),
            "{r} imports {beyond:?}: rules import only leaves and pure modules"
        );
    }
    // A use of a rules module written in full is an edge to it, not to its feature.
    let r =
        references("use crate::signed::receipt::lifecycle::{State, Update};\nuse crate::store::X;");
    let want: BTreeSet<String> = ["signed::receipt::lifecycle", "store"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(r, want);
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

// --- Inside the modules: every folder's children form no circle and none climbs back -----
//
// A module with children (`push/`, `store/fanout/`, `mailbox/push.rs` with `mailbox/push/`)
// is a small layered graph of its own: its children (files and folders) may import each
// other without a circle, and none of them may use an item defined in the module's own
// file (`mod.rs`, or `push.rs` beside `push/`), which sits above them: shared types go in
// a leaf child that the module's file re-exports. Test code is left out here: a test
// module's `use super::*` is meant to reach up.

/// One source file: its module path (`["push", "fcm", "client"]`) and its code without
/// strings, characters, comments and test modules.
struct Source {
    path: Vec<String>,
    code: String,
}

/// `text` with the insides of string and character literals blanked (so braces and `//`
/// in them are not read as code) and line comments removed.
fn strip_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        // A raw string: r"..." or r#"..."#.
        if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) {
            let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
            let mut j = i + 1;
            while j < b.len() && b[j] == b'#' {
                j += 1;
            }
            if !prev_ident && b.get(j) == Some(&b'"') {
                let hashes = j - i - 1;
                let close: String = std::iter::once('"')
                    .chain("#".repeat(hashes).chars())
                    .collect();
                let end = text[j + 1..]
                    .find(&close)
                    .map_or(b.len(), |e| j + 1 + e + close.len());
                out.push_str("\"\"");
                i = end;
                continue;
            }
        }
        if c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
            continue;
        }
        if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime.
            if b.get(i + 1) == Some(&b'\\') {
                let end = text[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e + 1);
                out.push_str("' '");
                i = end;
                continue;
            }
            let ch_len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
            if b.get(i + 1 + ch_len) == Some(&b'\'') {
                out.push_str("' '");
                i += ch_len + 2;
                continue;
            }
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let ch = text[i..].chars().next().unwrap();
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The code with every `#[cfg(test)]` module (inline or a file's declaration) cut out.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = rest[i + "#[cfg(test)]".len()..].trim_start();
        let item = after
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        if !item.starts_with("mod ") {
            rest = &rest[i + "#[cfg(test)]".len()..];
            continue;
        }
        let (Some(brace), semi) = (item.find('{'), item.find(';')) else {
            rest = &item[item.find(';').map_or(item.len(), |s| s + 1)..];
            continue;
        };
        if semi.is_some_and(|s| s < brace) {
            rest = &item[semi.unwrap() + 1..];
            continue;
        }
        let mut depth = 0;
        let mut end = item.len();
        for (j, ch) in item[brace..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = brace + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

fn sources() -> Vec<Source> {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let mut path: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_str().unwrap().to_owned())
            .collect();
        let last = path.pop().unwrap();
        match last.as_str() {
            "mod.rs" => {}
            "lib.rs" | "main.rs" if path.is_empty() => continue,
            f => path.push(f.trim_end_matches(".rs").to_owned()),
        }
        // Test code, whether one file or a folder of them.
        if path.iter().any(|m| m == "tests" || m.ends_with("_tests")) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        out.push(Source {
            path,
            code: without_tests(&strip_literals(&text)),
        });
    }
    out
}

/// Whether the character before byte `i` of `code` continues an identifier (or, with
/// `colons`, a path), so that what starts at `i` is not a word of its own.
fn inside_word(code: &str, i: usize, colons: bool) -> bool {
    code[..i]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The paths a `use` tree names, flattened: `a::{b, c::{d, self}}` is `a::b`, `a::c::d`,
/// `a::c`; `x as y` is `x`; a glob names its module.
fn use_tree(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(inner) = tree.strip_prefix('{') {
        let inner = inner.strip_suffix('}').unwrap_or(inner);
        let mut depth = 0;
        let mut start = 0;
        for (j, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    use_tree(&inner[start..j], prefix, out);
                    start = j + 1;
                }
                _ => {}
            }
        }
        use_tree(&inner[start..], prefix, out);
        return;
    }
    if tree.is_empty() || tree == "*" {
        if !prefix.is_empty() {
            out.push(prefix.to_vec());
        }
        return;
    }
    let name = ident_at(tree);
    let rest = tree[name.len()..].trim_start();
    let mut path = prefix.to_vec();
    if name != "self" {
        path.push(name.to_owned());
    }
    match rest.strip_prefix("::") {
        Some(more) => use_tree(more, &path, out),
        None => out.push(path),
    }
}

/// The modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_mods(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("mod ") {
        if inside_word(code, i, false) {
            continue;
        }
        let name = ident_at(&code[i + 4..]);
        if !name.is_empty() && code[i + 4 + name.len()..].trim_start().starts_with(';') {
            out.insert(name.to_owned());
        }
    }
    out
}

/// Every path `code` (of the module at `at`) names inside the crate, made absolute: `use`
/// trees and inline paths from `crate::`, `super::`, `self::`, or one of its own modules.
fn crate_paths(at: &[String], code: &str) -> Vec<Vec<String>> {
    let mods = declared_mods(code);
    let resolve = |p: Vec<String>| -> Option<Vec<String>> {
        let first = p.first()?.as_str();
        match first {
            "crate" => Some(p[1..].to_vec()),
            "super" | "self" => {
                let mut base = at.to_vec();
                let mut k = 0;
                while p.get(k).is_some_and(|s| s == "super") {
                    base.pop();
                    k += 1;
                }
                if k == 0 {
                    k = 1; // self
                }
                base.extend(p[k..].iter().cloned());
                Some(base)
            }
            m if mods.contains(m) => Some(at.iter().chain(p.iter()).cloned().collect()),
            _ => None,
        }
    };
    let mut raw = Vec::new();
    // `use` statements, whole trees.
    for (i, _) in code.match_indices("use ") {
        if inside_word(code, i, false) {
            continue;
        }
        let Some(end) = code[i..].find(';') else {
            continue;
        };
        use_tree(&code[i + 4..i + end], &[], &mut raw);
    }
    // Inline paths: `crate::a::b`, `super::x`, `child::f`.
    let mut starts: Vec<&str> = vec!["crate::", "super::", "self::"];
    let own: Vec<String> = mods.iter().map(|m| format!("{m}::")).collect();
    starts.extend(own.iter().map(String::as_str));
    for start in starts {
        for (i, _) in code.match_indices(start) {
            if inside_word(code, i, true) {
                continue;
            }
            let mut path = Vec::new();
            let mut s = &code[i..];
            loop {
                let name = ident_at(s);
                if name.is_empty() {
                    break;
                }
                path.push(name.to_owned());
                match s[name.len()..].strip_prefix("::") {
                    Some(more) => s = more,
                    None => break,
                }
            }
            raw.push(path);
        }
    }
    raw.into_iter().filter_map(resolve).collect()
}

/// The items a module's own file defines (functions, types, traits, constants, macros).
fn defined_items(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kw in [
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "type ",
        "const ",
        "static ",
        "macro_rules! ",
    ] {
        for (i, _) in code.match_indices(kw) {
            if inside_word(code, i, false) {
                continue;
            }
            let name = ident_at(&code[i + kw.len()..]);
            if !name.is_empty() {
                out.insert(name.to_owned());
            }
        }
    }
    out
}

/// What is wrong inside the modules: every climb (a child using an item of its parent
/// module's own file) and every circle among one module's children.
fn inner_faults(sources: &[Source]) -> BTreeSet<String> {
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.path.clone()).collect();
    let own: BTreeMap<&[String], &Source> =
        sources.iter().map(|s| (s.path.as_slice(), s)).collect();
    let mut faults = BTreeSet::new();
    // Per parent module: its children's graph.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    // What each module's own file defines, and re-exports from which child (name -> child).
    let defined: BTreeMap<&[String], BTreeSet<String>> = own
        .iter()
        .map(|(p, s)| (*p, defined_items(&s.code)))
        .collect();
    let reexports: BTreeMap<&[String], BTreeMap<String, String>> = own
        .iter()
        .map(|(p, s)| {
            let mut out = BTreeMap::new();
            for path in crate_paths(p, &s.code) {
                if path.len() > p.len() + 1 && path.starts_with(p) {
                    out.insert(path.last().unwrap().clone(), path[p.len()].clone());
                }
            }
            (*p, out)
        })
        .collect();
    for s in sources {
        for r in crate_paths(&s.path, &s.code) {
            for depth in 1..s.path.len() {
                let parent = &s.path[..depth];
                if !r.starts_with(parent) || r.len() <= depth {
                    continue;
                }
                let from = s.path[depth].clone();
                let to = if modules.contains(&r[..=depth]) {
                    r[depth].clone()
                } else {
                    if defined.get(parent).is_some_and(|d| d.contains(&r[depth])) {
                        faults.insert(format!(
                            "climb: {} uses {} of {}",
                            s.path.join("::"),
                            r[depth],
                            parent.join("::")
                        ));
                        continue;
                    }
                    match reexports.get(parent).and_then(|m| m.get(&r[depth])) {
                        Some(c) => c.clone(),
                        None => continue,
                    }
                };
                if to != from {
                    graphs
                        .entry(parent.to_vec())
                        .or_default()
                        .entry(from)
                        .or_default()
                        .insert(to);
                }
            }
        }
    }
    for (parent, g) in &graphs {
        if let Some(c) = cycle(g) {
            faults.insert(format!(
                "circle in {}: {}",
                parent.join("::"),
                c.join(" -> ")
            ));
        }
    }
    faults
}

fn source(path: &str, text: &str) -> Source {
    Source {
        path: path.split("::").map(str::to_owned).collect(),
        code: without_tests(&strip_literals(text)),
    }
}

#[test]
fn no_module_has_a_climb_or_a_circle_inside() {
    let sources = sources();
    assert!(sources.iter().any(|s| s.path == ["push", "fcm", "client"]));
    let faults = inner_faults(&sources);
    assert!(faults.is_empty(), "{faults:#?}");
}

#[test]
fn a_climb_and_a_circle_inside_a_module_are_found() {
    let parent = source(
        "svc",
        "mod a;\nmod b;\nmod leaf;\npub use leaf::Shared;\npub struct Settings;\n",
    );
    let climbing = source("svc::a", "use super::Settings;\nuse super::Shared;\n");
    let fine = source(
        "svc::b",
        "use super::leaf::Shared;\nfn f() -> &'static str { \"use super::Settings;\" }\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::svc::Settings;\n}\n",
    );
    let leaf = source("svc::leaf", "pub struct Shared;\n");
    let faults = inner_faults(&[parent, climbing, fine, leaf]);
    assert_eq!(
        faults,
        BTreeSet::from(["climb: svc::a uses Settings of svc".to_owned()])
    );

    let a = source("svc::a", "use crate::svc::b::B;\npub struct A;\n");
    let b = source("svc::b", "pub struct B(super::a::A);\n");
    let parent = source("svc", "mod a;\nmod b;\n");
    let faults = inner_faults(&[parent, a, b]);
    assert_eq!(
        faults,
        BTreeSet::from(["circle in svc: a -> b -> a".to_owned()])
    );
}

#[test]
fn use_trees_are_flattened() {
    let mut out = Vec::new();
    use_tree("crate::{a, b::{c as d, self}, e::*}", &[], &mut out);
    let want: Vec<Vec<String>> = [
        vec!["crate", "a"],
        vec!["crate", "b", "c"],
        vec!["crate", "b"],
        vec!["crate", "e"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(out, want);
}

/// Time comes from one place: no file of the crate but `clock.rs` reads the system's wall
/// clock (`SystemTime`) itself, so a test can move the relay's clock and a decision the
/// relay makes on the time cannot bypass the clock it was given.
#[test]
fn only_the_clock_reads_the_wall_clock() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut readers = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&root).unwrap().to_path_buf();
        if rel == Path::new("clock.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.contains("SystemTime") {
                readers.push(format!("src/{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        readers.is_empty(),
        "the wall clock read outside clock.rs: {readers:#?}"
    );
}
