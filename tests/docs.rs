//! The README documents exactly the variables the relay reads.

use std::collections::BTreeSet;

use sealrelay::config::VARS;

fn readme_vars() -> BTreeSet<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    readme
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
fn readme_table_matches_the_configuration() {
    let code: BTreeSet<String> = VARS.iter().map(|v| v.name.to_owned()).collect();
    let readme = readme_vars();
    let missing: Vec<_> = code.difference(&readme).collect();
    let unknown: Vec<_> = readme.difference(&code).collect();
    assert!(
        missing.is_empty(),
        "variables missing from the README table: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "README documents unknown variables: {unknown:?}"
    );
}

#[test]
fn readme_defaults_match_the_code() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for v in VARS {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", v.name)))
            .unwrap();
        let default = row.split('|').nth(2).unwrap().trim();
        match v.default {
            Some(d) => assert_eq!(default, format!("`{d}`"), "{}", v.name),
            None => assert!(default.starts_with("unset"), "{}: {default}", v.name),
        }
    }
}

#[test]
fn readme_starts_with_the_two_commands() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let head: String = readme.lines().take(6).collect::<Vec<_>>().join("\n");
    assert!(head.contains("cargo run --release"), "{head}");
    assert!(head.contains("scripts/test.sh"), "{head}");
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    assert!(ci.contains("scripts/test.sh"));
}
