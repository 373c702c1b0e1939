//! Every shell block README.md and `docs/` show is either run here, as written, against a
//! relay this test starts, or says where else it is checked and why not here. So an example
//! that stops working fails the suite instead of a reader.
//!
//! Markers are HTML comments on the lines right after a block's closing fence (invisible on
//! a rendered page):
//!
//! - `<!-- doc-test: run <session> -->`: run the block in `<session>` (one bash per session
//!   and file, blocks in file order, so a variable set in one block is seen by the next);
//!   `<!-- doc-test: run <session> before: <command> -->` runs `<command>` first (the relay
//!   a page tells the reader to start in an earlier section).
//! - `<!-- doc-test: terminals <session> -->`: each line is its own terminal, all at once in
//!   the background with nothing typed.
//! - `<!-- doc-test: elsewhere: <reason> -->`: not run here; the reason says what checks it
//!   (scripts/check-deploy.sh renders the chart commands) or what it needs that a test
//!   cannot have (a cluster, a registry, Apple's credentials).
//! - `<!-- doc-test expect: <text> -->`: the block's output (and what its background jobs
//!   print) contains `<text>`; `<!-- doc-test reject: <text> -->`: it does not.
//!
//! What the harness changes, and only this: `sealrelay` is the binary under test (a shell
//! function, so no stale binary on `PATH` is run), `cargo build` builds nothing and `cargo
//! run` runs it; a relay started by a block listens on ports it chooses, and the addresses
//! `127.0.0.1:8080` and `127.0.0.1:9090` in a block are rewritten to them (the client
//! commands' default URL too); `/tmp/sealrelay/` becomes the session's temporary directory,
//! which is also the working directory (with `scripts/` linked in). Everything a session
//! starts runs in its own process group and is killed when the session ends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// How long a session's blocks may run.
const SESSION_LIMIT: Duration = Duration::from_secs(60);
/// How long a session's background jobs get, once its blocks have run, to print what is
/// expected of them.
const BACKGROUND_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Run { before: Option<String> },
    Terminals,
    Elsewhere,
}

#[derive(Debug, Clone)]
struct Block {
    file: String,
    line: usize,
    code: String,
    session: String,
    mode: Mode,
    expect: Vec<String>,
    reject: Vec<String>,
}

/// The shell blocks of one Markdown text and their markers; an unmarked shell block, or a
/// marker that says nothing known, is an error naming its line.
fn blocks(file: &str, text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        if !fence.starts_with("```") {
            i += 1;
            continue;
        }
        let lang = fence.trim_start_matches('`').trim();
        let start = i;
        i += 1;
        let mut code = String::new();
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            code.push_str(lines[i]);
            code.push('\n');
            i += 1;
        }
        i += 1;
        if !matches!(lang, "sh" | "bash" | "shell" | "console") {
            continue;
        }
        let mut block = Block {
            file: file.to_owned(),
            line: start + 1,
            code,
            session: String::new(),
            mode: Mode::Elsewhere,
            expect: Vec::new(),
            reject: Vec::new(),
        };
        let mut marked = false;
        while i < lines.len() {
            let l = lines[i].trim();
            let Some(body) = l
                .strip_prefix("<!-- doc-test")
                .and_then(|r| r.strip_suffix("-->"))
            else {
                break;
            };
            let body = body.trim();
            if let Some(text) = body.strip_prefix("expect:") {
                block.expect.push(text.trim().to_owned());
            } else if let Some(text) = body.strip_prefix("reject:") {
                block.reject.push(text.trim().to_owned());
            } else if let Some(rest) = body.strip_prefix(": run ") {
                let (session, before) = match rest.split_once(" before: ") {
                    Some((s, b)) => (s, Some(b.trim().to_owned())),
                    None => (rest, None),
                };
                block.session = session.trim().to_owned();
                block.mode = Mode::Run { before };
                marked = true;
            } else if let Some(session) = body.strip_prefix(": terminals ") {
                block.session = session.trim().to_owned();
                block.mode = Mode::Terminals;
                marked = true;
            } else if let Some(reason) = body.strip_prefix(": elsewhere:") {
                if reason.trim().is_empty() {
                    return Err(format!("{file}:{}: elsewhere without a reason", i + 1));
                }
                marked = true;
            } else {
                return Err(format!("{file}:{}: unknown doc-test marker {l:?}", i + 1));
            }
            i += 1;
        }
        if !marked {
            return Err(format!(
                "{file}:{}: a shell block without a doc-test marker after it (run it, or say where it is checked)",
                start + 1
            ));
        }
        if block.mode == Mode::Elsewhere && !(block.expect.is_empty() && block.reject.is_empty()) {
            return Err(format!(
                "{file}:{}: expectations on a block that is not run",
                start + 1
            ));
        }
        out.push(block);
    }
    Ok(out)
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(ROOT).unwrap().to_owned())
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn all_blocks() -> Vec<Block> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for f in markdown_files() {
        let text = std::fs::read_to_string(Path::new(ROOT).join(&f)).unwrap();
        match blocks(&f.display().to_string(), &text) {
            Ok(b) => out.extend(b),
            Err(e) => problems.push(e),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    out
}

/// The functions every session starts with (see the module's documentation).
const PRELUDE: &str = r#"set -e
doc_port() {
  local i p
  for i in $(seq 600); do
    p=$(grep -h '"sealrelay serving"' "$DOC_TMP/relay.log" 2>/dev/null | sed -n 's/.*"'"$1"'":"127\.0\.0\.1:\([0-9]*\)".*/\1/p' | tail -n 1)
    if [ -n "$p" ]; then echo "$p"; return 0; fi
    sleep 0.1
  done
  echo "doc-test: no relay reported its $1 within 60 s" >&2
  return 1
}
sealrelay() {
  case "${1:-serve}" in
    serve|-*)
      [ "${1:-}" = serve ] && shift
      RELAY_LISTEN=127.0.0.1:0 RELAY_ADMIN_LISTEN=127.0.0.1:0 "$DOC_BIN" serve "$@" >>"$DOC_TMP/relay.log" 2>&1 ;;
    push|smoke)
      local cmd=$1; shift
      case " $* " in
        *" --url "*) "$DOC_BIN" "$cmd" "$@" ;;
        *) if [ "$cmd" = push ]; then "$DOC_BIN" push --url "http://127.0.0.1:$(doc_port addr)" "$@"; else "$DOC_BIN" smoke "$@"; fi ;;
      esac ;;
    *) "$DOC_BIN" "$@" ;;
  esac
}
cargo() {
  case "$1" in
    build) return 0 ;;
    run) shift; while [ "${1:-}" = --release ] || [ "${1:-}" = -- ]; do shift; done; sealrelay "$@" ;;
    *) echo "doc-test: cargo $1 is not run here" >&2; return 1 ;;
  esac
}
"#;

/// A block's text as the session runs it: the relay's addresses and temporary paths replaced.
fn rewrite(code: &str) -> String {
    code.replace("127.0.0.1:8080", "127.0.0.1:$(doc_port addr)")
        .replace("127.0.0.1:9090", "127.0.0.1:$(doc_port admin_addr)")
        .replace("/tmp/sealrelay/", "$DOC_TMP/")
}

fn marker(n: usize) -> String {
    format!("@@doc-test block {n}@@")
}

/// The script of one session: the prelude, then each block after a line that marks where
/// its output starts.
fn script(blocks: &[&Block]) -> String {
    let mut s = String::from(PRELUDE);
    for (n, b) in blocks.iter().enumerate() {
        s.push_str(&format!("echo '{}'\n", marker(n)));
        if let Mode::Run {
            before: Some(before),
        } = &b.mode
        {
            s.push_str(&rewrite(before));
            s.push('\n');
        }
        match b.mode {
            Mode::Terminals => {
                for line in b.code.lines().filter(|l| !l.trim().is_empty()) {
                    s.push_str(&format!("{} </dev/null &\n", rewrite(line)));
                }
            }
            _ => s.push_str(&rewrite(&b.code)),
        }
    }
    s.push_str("echo '@@doc-test end@@'\n");
    s
}

/// Which expectations of which blocks the output does not meet yet.
fn unmet(blocks: &[&Block], output: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (n, b) in blocks.iter().enumerate() {
        let from = output.find(&marker(n)).map_or(output.len(), |i| i);
        for e in &b.expect {
            if !output[from..].contains(e.as_str()) {
                out.push(format!("{}:{}: expected {e:?}", b.file, b.line));
            }
        }
    }
    out
}

/// Runs one session; its output, and what went wrong.
fn run_session(name: &str, blocks: &[&Block]) -> (String, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(Path::new(ROOT).join("scripts"), tmp.path().join("scripts"))
        .unwrap();
    let out_path = tmp.path().join("session.out");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut path = std::env::var("PATH").unwrap_or_default();
    // The test kit's Python (with websockets), where scripts/test.sh made one.
    if let Some(py) = std::env::var_os("SEALRELAY_E2E_PYTHON") {
        if let Some(dir) = Path::new(&py).parent() {
            path = format!("{}:{path}", dir.display());
        }
    }
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script(blocks))
        .current_dir(tmp.path())
        .env("PATH", path)
        .env("DOC_BIN", env!("CARGO_BIN_EXE_sealrelay"))
        .env("DOC_TMP", tmp.path())
        .env_remove("RELAY_LISTEN")
        .env_remove("RELAY_ADMIN_LISTEN")
        .env_remove("REDIS_URL")
        // Not the default /run/sealrelay: sessions run side by side.
        .env("RELAY_ADMIN_SOCKET", tmp.path().join("default-admin.sock"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().expect("bash");
    let pgid = child.id();
    let started = Instant::now();
    let mut problems = Vec::new();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > SESSION_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    match status {
        Some(s) if s.success() => {}
        Some(s) => problems.push(format!("session {name} exited with {s}")),
        None => problems.push(format!(
            "session {name} ran past {}s",
            SESSION_LIMIT.as_secs()
        )),
    }
    // Background jobs (a watch, the relay) may print what is expected a moment later.
    let read = || std::fs::read_to_string(&out_path).unwrap_or_default();
    let grace = Instant::now() + BACKGROUND_GRACE;
    while !unmet(blocks, &read()).is_empty() && Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
    let output = read();
    problems.extend(unmet(blocks, &output));
    for (n, b) in blocks.iter().enumerate() {
        let from = output.find(&marker(n)).map_or(output.len(), |i| i);
        let to = output.find(&marker(n + 1)).unwrap_or(output.len());
        for r in &b.reject {
            if output[from..to.max(from)].contains(r.as_str()) {
                problems.push(format!("{}:{}: printed {r:?}", b.file, b.line));
            }
        }
    }
    let relay_log = std::fs::read_to_string(tmp.path().join("relay.log")).unwrap_or_default();
    let mut shown = output;
    if !problems.is_empty() && !relay_log.is_empty() {
        shown.push_str("\n--- relay.log ---\n");
        shown.push_str(&relay_log);
    }
    (shown, problems)
}

fn sessions() -> BTreeMap<(String, String), Vec<Block>> {
    let mut by: BTreeMap<(String, String), Vec<Block>> = BTreeMap::new();
    for b in all_blocks() {
        if b.mode != Mode::Elsewhere {
            by.entry((b.file.clone(), b.session.clone()))
                .or_default()
                .push(b);
        }
    }
    by
}

#[test]
fn every_shell_block_is_run_or_says_where_it_is_checked() {
    let blocks = all_blocks();
    let run = blocks.iter().filter(|b| b.mode != Mode::Elsewhere).count();
    assert!(run >= 5, "only {run} blocks are run");
    for b in &blocks {
        if b.mode != Mode::Elsewhere {
            assert!(
                !b.expect.is_empty(),
                "{}:{}: a block that is run says what it prints (doc-test expect:)",
                b.file,
                b.line
            );
        }
    }
}

#[test]
fn the_marker_parser_refuses_what_it_does_not_know() {
    let unmarked = "text\n```sh\necho hi\n```\nmore\n";
    assert!(blocks("x.md", unmarked).unwrap_err().contains("x.md:2"));
    let unknown = "```sh\necho hi\n```\n<!-- doc-test: sometimes -->\n";
    assert!(blocks("x.md", unknown).unwrap_err().contains("unknown"));
    let no_reason = "```sh\necho hi\n```\n<!-- doc-test: elsewhere: -->\n";
    assert!(blocks("x.md", no_reason).is_err());
    let ok = "```sh\nU=1\necho $U\n```\n<!-- doc-test: run s before: true -->\n<!-- doc-test expect: 1 -->\n```json\n{}\n```\n";
    let b = blocks("x.md", ok).unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(
        b[0].mode,
        Mode::Run {
            before: Some("true".into())
        }
    );
    assert_eq!(b[0].expect, vec!["1".to_owned()]);
    assert_eq!(
        rewrite("curl http://127.0.0.1:8080/ 127.0.0.1:9090 /tmp/sealrelay/a.sock"),
        "curl http://127.0.0.1:$(doc_port addr)/ 127.0.0.1:$(doc_port admin_addr) $DOC_TMP/a.sock"
    );
}

/// A session that breaks is reported with the line of the block: the harness can fail.
#[test]
fn a_broken_example_fails() {
    let text = "```sh\nRELAY_DRY_RUN=true sealrelay &\ncurl -s http://127.0.0.1:8080/ -d '{}'\n```\n<!-- doc-test: run s -->\n<!-- doc-test expect: \"outcome\":\"forwarded\" -->\n";
    let b = blocks("broken.md", text).unwrap();
    let refs: Vec<&Block> = b.iter().collect();
    let (output, problems) = run_session("s", &refs);
    assert_eq!(
        problems,
        vec!["broken.md:1: expected \"\\\"outcome\\\":\\\"forwarded\\\"\"".to_owned()],
        "{output}"
    );
    assert!(
        output.contains("\"error\""),
        "the relay answered 400: {output}"
    );
}

#[test]
#[ignore = "runs the documented examples with the test kit's Python (websockets): scripts/test.sh sets SEALRELAY_E2E_PYTHON and runs ignored tests"]
fn documented_examples_run_as_written() {
    let mut failures = Vec::new();
    for ((file, session), blocks) in sessions() {
        let refs: Vec<&Block> = blocks.iter().collect();
        let (output, problems) = run_session(&session, &refs);
        if !problems.is_empty() {
            failures.push(format!(
                "{file}, session {session}:\n  {}\n--- output ---\n{output}",
                problems.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
