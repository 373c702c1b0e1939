//! The documentation stays true to the code and to itself: the configuration reference's
//! variable tables (`docs/configuration.md`) are rendered from the variable table in
//! `src/config/vars.rs` (`UPDATE_CONFIG_DOCS=1 cargo nextest run -E 'test(configuration_tables_are_rendered_from_the_code)'` rewrites them), and
//! the chart's `values.schema.json` holds the same bounds; the README starts with the two commands CI runs; and every relative link in the
//! repository's Markdown resolves to a file inside the repository (and, with an anchor into
//! a Markdown file, to one of its headings).

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use sealrelay::config::{Kind, Section, Var, VARS};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The page that holds the variable table.
const CONFIGURATION: &str = "docs/configuration.md";

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel))
        .unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

fn documented_vars() -> BTreeSet<String> {
    read(CONFIGURATION)
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| {
            n.chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn configuration_table_matches_the_configuration() {
    let code: BTreeSet<String> = VARS.iter().map(|v| v.name.to_owned()).collect();
    let documented = documented_vars();
    let missing: Vec<_> = code.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&code).collect();
    assert!(
        missing.is_empty(),
        "variables missing from the table in {CONFIGURATION}: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "{CONFIGURATION} documents unknown variables: {unknown:?}"
    );
}

#[test]
fn configuration_defaults_match_the_code() {
    let text = read(CONFIGURATION);
    for v in VARS {
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", v.name)))
            .unwrap_or_else(|| panic!("{CONFIGURATION} has no row for {}", v.name));
        let default = row.split('|').nth(2).unwrap().trim();
        match v.default {
            Some(d) => assert_eq!(default, format!("`{d}`"), "{}", v.name),
            None => assert!(default.starts_with("unset"), "{}: {default}", v.name),
        }
    }
}

/// One section's table, as the reference shows it.
fn render_table(section: Section) -> Vec<String> {
    let mut out = vec![
        "| Variable | Default | Allowed | Meaning |".to_owned(),
        "| --- | --- | --- | --- |".to_owned(),
    ];
    for v in VARS.iter().filter(|v| v.section == section) {
        let default = v.default.map_or("unset".to_owned(), |d| format!("`{d}`"));
        out.push(format!(
            "| `{}` | {default} | {} | {} |",
            v.name,
            v.kind.allowed(),
            v.help
        ));
    }
    out
}

/// `text` with every section's table replaced by its rendering; `Err` names a section whose
/// heading or table is missing.
fn render_reference(text: &str) -> Result<String, String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for section in Section::ALL {
        let heading = format!("### {}", section.title());
        let at = lines
            .iter()
            .position(|l| *l == heading)
            .ok_or_else(|| format!("no heading {heading:?}"))?;
        let start = (at + 1..lines.len())
            .find(|&i| lines[i].starts_with('|'))
            .filter(|&i| lines[at + 1..i].iter().all(|l| !l.starts_with('#')))
            .ok_or_else(|| format!("no table under {heading:?}"))?;
        let end = (start..lines.len())
            .find(|&i| !lines[i].starts_with('|'))
            .unwrap_or(lines.len());
        lines.splice(start..end, render_table(section));
    }
    Ok(lines.join("\n") + "\n")
}

#[test]
fn configuration_tables_are_rendered_from_the_code() {
    for v in VARS {
        assert!(
            !v.help.contains('|'),
            "{}: a | would split the table's row",
            v.name
        );
    }
    let text = read(CONFIGURATION);
    let rendered = render_reference(&text).unwrap_or_else(|e| panic!("{CONFIGURATION}: {e}"));
    if rendered == text {
        return;
    }
    if std::env::var_os("UPDATE_CONFIG_DOCS").is_some() {
        std::fs::write(Path::new(ROOT).join(CONFIGURATION), &rendered).unwrap();
        return;
    }
    let diff: Vec<String> = text
        .lines()
        .zip(rendered.lines())
        .filter(|(a, b)| a != b)
        .take(10)
        .map(|(a, b)| format!("- {a}\n+ {b}"))
        .collect();
    panic!(
        "{CONFIGURATION}'s variable tables differ from src/config/vars.rs (rerun with UPDATE_CONFIG_DOCS=1 to rewrite them); first differences:\n{}",
        diff.join("\n")
    );
}

/// The constraint of a variable's value under the chart's `env`: the alternative that is
/// not `""`.
fn env_constraint<'a>(schema: &'a serde_json::Value, v: &Var) -> &'a serde_json::Value {
    let node = &schema["properties"]["env"]["properties"][v.name];
    match node["anyOf"].as_array() {
        Some(alts) => alts
            .iter()
            .find(|a| a.get("const").is_none())
            .unwrap_or(node),
        None => node,
    }
}

#[test]
fn chart_schema_bounds_match_the_code() {
    let schema: serde_json::Value =
        serde_json::from_str(&read("helm/sealrelay/values.schema.json")).unwrap();
    let secrets = schema["properties"]["env"]["propertyNames"]["not"]["enum"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut problems = Vec::new();
    for v in VARS {
        if secrets.iter().any(|s| s == v.name) {
            // Refused under env: it comes from a Secret.
            continue;
        }
        let c = env_constraint(&schema, v);
        let num = |k: &str| c[k].as_f64();
        let ok = match v.kind {
            Kind::Int(lo, hi) => {
                num("minimum") == Some(lo as f64) && num("maximum") == Some(hi as f64)
            }
            Kind::Float(lo, hi) => num("minimum") == Some(lo) && num("maximum") == Some(hi),
            Kind::Enum(words) => c["enum"].as_array().is_some_and(|e| {
                e.iter()
                    .map(|w| w.as_str())
                    .eq(words.iter().map(|w| Some(*w)))
            }),
            Kind::Text(min, max) => {
                num("maxLength") == Some(max as f64)
                    && num("minLength").unwrap_or(0.0) == min as f64
            }
            _ => !c.is_null(),
        };
        if !ok {
            problems.push(format!("{}: {:?} but the schema has {c}", v.name, v.kind));
        }
    }
    assert!(
        problems.is_empty(),
        "helm/sealrelay/values.schema.json is stale (run scripts/gen_values_schema.py):\n{}",
        problems.join("\n")
    );
}

#[test]
fn readme_starts_with_the_two_commands() {
    let readme = read("README.md");
    let head: String = readme.lines().take(6).collect::<Vec<_>>().join("\n");
    assert!(head.contains("cargo run --release"), "{head}");
    assert!(head.contains("scripts/test.sh"), "{head}");
    let ci = read(".ci/run");
    assert!(ci.contains("scripts/test.sh"));
}

// ---------------------------------------------------------------------------------------
// Relative links.

/// Every Markdown file of the repository, relative to its root (build output, VCS data,
/// installed packages and vendored crates' own documents left out).
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let path = entry.path();
            let rel = rel.join(&*name);
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if name.starts_with('.') || name == "target" || name == "node_modules" {
                    continue;
                }
                walk(&path, &rel, out);
            } else if name.ends_with(".md") {
                // A vendored crate's own documents are upstream's; only our notes on it count.
                if rel.starts_with("vendor") && name != "PATCHES.md" {
                    continue;
                }
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new(ROOT), Path::new(""), &mut out);
    out.sort();
    out
}

/// The text of a Markdown file outside fenced code blocks and inline code spans (each code
/// character replaced by a space, so nothing in code reads as a link), line by line.
fn prose_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |m| trimmed.chars().take_while(|c| *c == m).count());
        match fence {
            Some((m, n)) => {
                if marker == Some(m) && run >= n && trimmed[run..].trim().is_empty() {
                    fence = None;
                }
                out.push(String::new());
                continue;
            }
            None if run >= 3 => {
                fence = marker.map(|m| (m, run));
                out.push(String::new());
                continue;
            }
            None => {}
        }
        out.push(blank_inline_code(line));
    }
    out
}

/// `line` with every inline code span (a run of backticks to the next run of the same
/// length) blanked out.
fn blank_inline_code(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let open = chars[i..].iter().take_while(|c| **c == '`').count();
        let mut j = i + open;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let n = chars[j..].iter().take_while(|c| **c == '`').count();
                if n == open {
                    close = Some(j + n);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                out.extend(std::iter::repeat_n(' ', end - i));
                i = end;
            }
            // An unmatched run of backticks is literal text.
            None => {
                out.extend(std::iter::repeat_n('`', open));
                i += open;
            }
        }
    }
    out
}

/// The link targets of one prose line: inline links and images `[text](target "title")`,
/// and reference definitions `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some(close) = trimmed.find("]:") {
            if let Some(target) = trimmed[close + 2..].split_whitespace().next() {
                out.push(target.trim_matches(['<', '>']).to_owned());
            }
            return out;
        }
    }
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(off) = line[i..].find("](") {
        let start = i + off + 2;
        // The target runs to the matching parenthesis (balanced, as CommonMark allows).
        let mut depth = 1;
        let mut end = start;
        while end < bytes.len() {
            match bytes[end] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        if end >= bytes.len() {
            break;
        }
        let inner = line[start..end].trim();
        let target = if let Some(rest) = inner.strip_prefix('<') {
            rest.split('>').next().unwrap_or_default()
        } else {
            inner.split_whitespace().next().unwrap_or_default()
        };
        out.push(target.to_owned());
        i = end + 1;
    }
    out
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, every other character that is
/// not a letter, a digit, `-` or `_` dropped; a repeated heading gets `-1`, `-2`, ...
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for line in prose_heading_lines(text) {
        let title = line
            .trim_start_matches('#')
            .trim()
            .trim_end_matches('#')
            .trim();
        let mut slug = String::new();
        for c in title.chars() {
            if c == ' ' {
                slug.push('-');
            } else if c.is_alphanumeric() || c == '-' || c == '_' {
                slug.extend(c.to_lowercase());
            }
        }
        let n = seen.entry(slug.clone()).or_insert(0);
        let anchor = if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        };
        *n += 1;
        out.insert(anchor);
    }
    out
}

/// ATX headings outside fenced code (inline code kept: its text is part of the anchor).
fn prose_heading_lines(text: &str) -> Vec<String> {
    let prose = prose_lines(text);
    text.lines()
        .zip(prose)
        .filter(|(_, p)| !p.is_empty())
        .map(|(raw, _)| raw)
        .filter(|l| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            (1..=6).contains(&hashes) && l[hashes..].starts_with(' ')
        })
        .map(|l| l.replace('`', ""))
        .collect()
}

/// `base/target` with `.` and `..` resolved, or `None` when it leaves the repository root.
fn resolve(base: &Path, target: &str) -> Option<PathBuf> {
    let joined = if let Some(abs) = target.strip_prefix('/') {
        PathBuf::from(abs)
    } else {
        base.join(target)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The broken relative links of one Markdown file (`rel`, relative to the root), as
/// `file:line: target: why`.
fn broken_links(rel: &Path, text: &str) -> Vec<String> {
    let root = Path::new(ROOT);
    let base = rel.parent().unwrap_or(Path::new(""));
    let mut problems = Vec::new();
    for (n, line) in prose_lines(text).iter().enumerate() {
        for target in link_targets(line) {
            let lower = target.to_ascii_lowercase();
            if target.is_empty()
                || lower.starts_with("http://")
                || lower.starts_with("https://")
                || lower.starts_with("mailto:")
            {
                continue;
            }
            let at = format!("{}:{}: {target}", rel.display(), n + 1);
            if target.contains("://") || lower.starts_with("javascript:") {
                problems.push(format!(
                    "{at}: not a relative link, and not http(s) or mailto"
                ));
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let path = path.replace("%20", " ");
            if path.is_empty() {
                let anchor = anchor.unwrap_or_default();
                if !heading_anchors(text).contains(anchor) {
                    problems.push(format!(
                        "{at}: no heading of this file has the anchor #{anchor}"
                    ));
                }
                continue;
            }
            let Some(file) = resolve(base, &path) else {
                problems.push(format!("{at}: leaves the repository"));
                continue;
            };
            let full = root.join(&file);
            if !full.exists() {
                problems.push(format!("{at}: {} does not exist", file.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                if file.extension().is_some_and(|e| e == "md") && full.is_file() {
                    let anchors = heading_anchors(&std::fs::read_to_string(&full).unwrap());
                    if !anchors.contains(anchor) {
                        problems.push(format!(
                            "{at}: no heading of {} has the anchor #{anchor}",
                            file.display()
                        ));
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_resolves() {
    let files = markdown_files();
    assert!(
        files.iter().any(|f| f == Path::new("README.md")),
        "no README.md found among {files:?}"
    );
    let mut problems = Vec::new();
    for rel in &files {
        let text = std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap();
        problems.extend(broken_links(rel, &text));
    }
    assert!(
        problems.is_empty(),
        "broken links in the Markdown ({} files scanned):\n{}",
        files.len(),
        problems.join("\n")
    );
}

#[test]
fn the_link_scanner_finds_what_it_should() {
    // Links, images and reference definitions; nothing in code.
    let text = "see [a](docs/x.md#part) and ![i](img.png \"t\")\n\
                `[not](a link)` and ``[nor](this)``\n\
                ```sh\n[in](fence)\n```\n\
                [ref]: ../outside.md\n\
                [p](f(1).md)";
    let found: Vec<String> = prose_lines(text)
        .iter()
        .flat_map(|l| link_targets(l))
        .collect();
    assert_eq!(
        found,
        vec!["docs/x.md#part", "img.png", "../outside.md", "f(1).md"]
    );
    // GitHub's slugs.
    let anchors = heading_anchors(
        "# Redis URLs\n## Shared state (Redis) and the retry queue\n## `sealrelay keygen`: keys\n## Redis URLs\n```\n# not a heading\n```",
    );
    let expected: BTreeSet<String> = [
        "redis-urls",
        "shared-state-redis-and-the-retry-queue",
        "sealrelay-keygen-keys",
        "redis-urls-1",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(anchors, expected);
    // Escapes are refused, anchors are checked, missing files are reported.
    assert_eq!(resolve(Path::new("docs"), "../../shared/SIGNED.md"), None);
    assert_eq!(
        resolve(Path::new("docs"), "../README.md"),
        Some(PathBuf::from("README.md"))
    );
    let bad = broken_links(
        Path::new("docs/example.md"),
        "[a](../../shared/SIGNED.md) [b](../README.md#no-such-heading) [c](missing.md) \
         [d](../README.md#documentation) [e](https://example.com/x) [f](#nowhere)",
    );
    assert_eq!(bad.len(), 4, "{bad:#?}");
    assert!(bad[0].contains("leaves the repository"), "{}", bad[0]);
    assert!(bad[1].contains("#no-such-heading"), "{}", bad[1]);
    assert!(bad[2].contains("does not exist"), "{}", bad[2]);
    assert!(bad[3].contains("#nowhere"), "{}", bad[3]);
}
