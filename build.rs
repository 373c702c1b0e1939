//! Sets `SEALRELAY_GIT_SHA` (the `git_sha` label of `sealrelay_build_info`) to the commit
//! being built, so every build says what it was built from: `cargo run`, the image scripts,
//! the release workflow. An explicit `SEALRELAY_GIT_SHA` wins (the Dockerfile sets it: its
//! build context has no `.git`); outside a git checkout it stays unset ("unknown").

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=SEALRELAY_GIT_SHA");
    if std::env::var_os("SEALRELAY_GIT_SHA").is_some() {
        return;
    }
    let Some(sha) = git(&["rev-parse", "HEAD"]) else {
        return;
    };
    if !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return;
    }
    println!("cargo:rustc-env=SEALRELAY_GIT_SHA={sha}");
    // Built again when HEAD moves: a checkout, a commit, a fetch of packed refs.
    // (Only files that exist: cargo reruns a build script every time for a missing one.)
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for path in watched {
        if let Some(p) = git(&["rev-parse", "--git-path", &path]) {
            if std::path::Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
}
