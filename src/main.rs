//! The `sealrelay` binary: parses flags and environment, then calls into the library.

use std::collections::HashMap;
use std::process::ExitCode;

use clap::{Arg, ArgAction, Command};
use sealrelay::config::{Config, UnknownVars, VARS};

/// mimalloc: per-thread free lists without glibc's arena lock, which the runtime's worker
/// threads contended on (a request is often freed on another thread than allocated it),
/// and freed pages go back to the OS.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn cli() -> Command {
    let mut cmd = Command::new("sealrelay")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Push relay: forwards sealed alerts to APNs. Every flag is also an environment variable.")
        .subcommand(Command::new("serve").about("Serve (the default)"))
        .subcommand(Command::new("check-config").about("Validate the configuration and exit 0 or 1 with the reasons"))
        .subcommand(
            Command::new("smoke")
                .about("POST one well-formed envelope for a random device; exit 0 on a healthy answer (410 BadDeviceToken against real credentials, 202 forwarded in dry run)")
                .arg(Arg::new("url").required(true).help("The relay's URL, e.g. http://127.0.0.1:8080/")),
        )
        .subcommand(
            Command::new("keygen")
                .about("Write a new Ed25519 signer key (PKCS#8 PEM, mode 0600) and print its public key for enrolment")
                .arg(Arg::new("out").long("out").default_value("sealrelay-signer.pem").help("Where to write the key; an existing file is never overwritten")),
        )
        .subcommand(admin_command())
        .subcommand(push_command());
    for v in VARS {
        let flag: &'static str = Box::leak(Config::flag_name(v.name).into_boxed_str());
        let mut help = v.help.to_owned();
        if let Some(d) = v.default {
            help.push_str(&format!(" [default: {d}]"));
        }
        cmd = cmd.arg(
            Arg::new(v.name)
                .long(flag)
                .env(v.name)
                .hide_env_values(true)
                .global(true)
                .action(ArgAction::Set)
                .help(help),
        );
    }
    cmd
}

fn admin_command() -> Command {
    let key_id = || {
        Arg::new("key-id")
            .required(true)
            .help("The signer's key id, ed25519:<name>")
    };
    Command::new("admin")
        .about("The admin API: signers and receipts, over the admin socket (or --url and --token-file)")
        .subcommand_required(true)
        .arg(Arg::new("socket").long("socket").help("The admin socket [default: RELAY_ADMIN_SOCKET's value]"))
        .arg(Arg::new("admin-url").long("url").help("The admin API over loopback TCP, e.g. http://127.0.0.1:9091 (RELAY_ADMIN_API_LISTEN)"))
        .arg(Arg::new("token-file").long("token-file").help("The bearer token file, with --url (RELAY_ADMIN_TOKEN_FILE)"))
        .subcommand(
            Command::new("signers")
                .about("Enrol, list and revoke signers")
                .subcommand_required(true)
                .subcommand(
                    Command::new("add")
                        .about("Enrol a signer, or update its key and topics")
                        .arg(key_id())
                        .arg(Arg::new("public-key").long("public-key").help("Its public key: standard base64 of 32 bytes (what keygen prints)"))
                        .arg(Arg::new("key").long("key").help("Or its private key file, to derive the public key from"))
                        .arg(Arg::new("topic").long("topic").required(true).action(ArgAction::Append).help("An APNs topic it may push to (repeat for more)")),
                )
                .subcommand(
                    Command::new("list")
                        .about("List the signers")
                        .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the API's JSON")),
                )
                .subcommand(Command::new("revoke").about("Revoke a signer (effective on every replica within a second)").arg(key_id())),
        )
        .subcommand(
            Command::new("receipt")
                .about("Print any push's receipt")
                .arg(Arg::new("push-id").required(true)),
        )
}

fn push_command() -> Command {
    Command::new("push")
        .about("Sign one push and send it to /v2/pushes; print the receipt; with --wait follow it until settled")
        .arg(Arg::new("push-url").long("url").default_value("http://127.0.0.1:8080").help("The relay's public URL"))
        .arg(Arg::new("key").long("key").required(true).help("The signer's private key file (from keygen)"))
        .arg(Arg::new("key-id").long("key-id").required(true).help("The signer's enrolled key id, ed25519:<name>"))
        .arg(Arg::new("target").long("target").required(true).action(ArgAction::Append).help("<device token hex>=<ciphertext base64>; repeat for up to 100 devices"))
        .arg(Arg::new("topic").long("topic").help("The APNs topic [default: the relay's APNS_TOPIC]"))
        .arg(Arg::new("suite").long("suite").help("The ciphertexts' suite, e.g. x25519"))
        .arg(Arg::new("collapse-id").long("collapse-id").help("32 lowercase hex [default: random]"))
        .arg(Arg::new("flap-id").long("flap-id").help("32 lowercase hex"))
        .arg(Arg::new("priority").long("priority").default_value("time-sensitive").value_parser(["time-sensitive", "passive"]))
        .arg(Arg::new("event").long("event").action(ArgAction::SetTrue).help("The alert is an event, not a state change"))
        .arg(Arg::new("request-id").long("request-id").help("A lowercase UUID [default: random]; send the same one again to retry safely"))
        .arg(Arg::new("wait").long("wait").action(ArgAction::SetTrue).help("Follow the push's events until it is settled"))
        .arg(Arg::new("wait-timeout-s").long("wait-timeout-s").default_value("900").value_parser(clap::value_parser!(u64)))
}

/// Runs a client subcommand (`keygen`, `admin`, `push`), if `matches` names one.
fn client(
    matches: &clap::ArgMatches,
    values: &HashMap<String, String>,
    runtime: &tokio::runtime::Runtime,
) -> Option<ExitCode> {
    use sealrelay::cli;
    let fail = |e: anyhow::Error, what: &str| {
        eprintln!("sealrelay {what}: {e:#}");
        ExitCode::FAILURE
    };
    match matches.subcommand()? {
        ("keygen", sub) => {
            let out = std::path::PathBuf::from(sub.get_one::<String>("out").expect("defaulted"));
            Some(match cli::keygen::run(&out) {
                Ok(public) => {
                    eprintln!("wrote {} (mode 0600); its public key:", out.display());
                    println!("{public}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e, "keygen"),
            })
        }
        ("admin", sub) => {
            let socket = sub
                .get_one::<String>("socket")
                .cloned()
                .or_else(|| values.get("RELAY_ADMIN_SOCKET").cloned())
                .unwrap_or_else(|| "/run/sealrelay/admin.sock".to_owned());
            let client = match cli::admin::AdminClient::new(
                std::path::Path::new(&socket),
                sub.get_one::<String>("admin-url").map(String::as_str),
                sub.get_one::<String>("token-file")
                    .map(std::path::Path::new),
            ) {
                Ok(c) => c,
                Err(e) => return Some(fail(e, "admin")),
            };
            let answer = runtime.block_on(async {
                match sub.subcommand() {
                    Some(("signers", s)) => match s.subcommand() {
                        Some(("add", a)) => {
                            let public = cli::admin::public_key(
                                a.get_one::<String>("public-key").map(String::as_str),
                                a.get_one::<String>("key")
                                    .map(std::path::PathBuf::from)
                                    .as_ref(),
                            )?;
                            let topics: Vec<String> = a
                                .get_many::<String>("topic")
                                .into_iter()
                                .flatten()
                                .cloned()
                                .collect();
                            client
                                .enroll(
                                    a.get_one::<String>("key-id").expect("required"),
                                    &public,
                                    &topics,
                                )
                                .await
                        }
                        Some(("list", l)) => client.list(l.get_flag("json")).await,
                        Some(("revoke", r)) => {
                            client
                                .revoke(r.get_one::<String>("key-id").expect("required"))
                                .await
                        }
                        _ => unreachable!("clap requires a subcommand"),
                    },
                    Some(("receipt", r)) => {
                        client
                            .receipt(r.get_one::<String>("push-id").expect("required"))
                            .await
                    }
                    _ => unreachable!("clap requires a subcommand"),
                }
            });
            Some(match answer {
                Ok(a) if a.ok => {
                    println!("{}", a.text);
                    ExitCode::SUCCESS
                }
                Ok(a) => {
                    eprintln!("sealrelay admin: {}", a.text);
                    ExitCode::FAILURE
                }
                Err(e) => fail(e, "admin"),
            })
        }
        ("push", sub) => {
            let get = |n: &str| sub.get_one::<String>(n).cloned();
            let mut targets = Vec::new();
            for t in sub.get_many::<String>("target").into_iter().flatten() {
                match t.split_once('=') {
                    Some((d, c)) => targets.push((d.to_owned(), c.to_owned())),
                    None => {
                        return Some(fail(
                            anyhow::anyhow!(
                                "--target {t:?}: expected <device token hex>=<ciphertext base64>"
                            ),
                            "push",
                        ))
                    }
                }
            }
            let args = cli::push::Args {
                url: get("push-url").expect("defaulted"),
                key: std::path::PathBuf::from(get("key").expect("required")),
                key_id: get("key-id").expect("required"),
                topic: get("topic"),
                targets,
                suite: get("suite"),
                collapse_id: get("collapse-id"),
                flap_id: get("flap-id"),
                priority: get("priority").expect("defaulted"),
                event: sub.get_flag("event"),
                request_id: get("request-id"),
                wait: sub.get_flag("wait"),
                wait_timeout: std::time::Duration::from_secs(
                    *sub.get_one::<u64>("wait-timeout-s").expect("defaulted"),
                ),
            };
            let mut out = std::io::stdout();
            Some(match runtime.block_on(cli::push::run(&args, &mut out)) {
                Ok(cli::push::Ended::Ok) => ExitCode::SUCCESS,
                Ok(cli::push::Ended::Undelivered) => ExitCode::from(2),
                Ok(cli::push::Ended::Refused) => ExitCode::FAILURE,
                Err(e) => fail(e, "push"),
            })
        }
        _ => None,
    }
}

fn main() -> ExitCode {
    let matches = cli().get_matches();
    // The whole environment, before the flags below are copied into it: what the relay does
    // not read is looked at too (names only are ever printed).
    let env: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let values: HashMap<String, String> = VARS
        .iter()
        .filter_map(|v| {
            matches
                .get_one::<String>(v.name)
                .map(|s| (v.name.to_owned(), s.clone()))
        })
        .collect();
    // The trace exporter reads the standard OTEL_* variables from the environment; a value
    // given as a flag must reach it the same way. No other thread runs yet.
    for (name, v) in &values {
        if name.starts_with("OTEL_") {
            std::env::set_var(name, v);
        }
    }
    let config_values = values.clone();
    let lookup = move |name: &str| config_values.get(name).cloned();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sealrelay: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };

    if let Some(code) = client(&matches, &values, &runtime) {
        return code;
    }

    if let Some(("smoke", sub)) = matches.subcommand() {
        let url = sub.get_one::<String>("url").expect("required");
        return match runtime.block_on(sealrelay::cli::smoke::run(url)) {
            Ok((status, body)) => {
                println!("{status} {body}");
                if sealrelay::cli::smoke::healthy(status, &body) {
                    ExitCode::SUCCESS
                } else {
                    eprintln!("sealrelay smoke: not a healthy answer (healthy: 410 BadDeviceToken with real credentials, 202 forwarded in dry run)");
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("sealrelay smoke: {e}");
                ExitCode::FAILURE
            }
        };
    }

    let check_only = matches!(matches.subcommand(), Some(("check-config", _)));
    let unknown = if check_only {
        UnknownVars::Refuse
    } else {
        UnknownVars::Warn
    };
    let cfg = match Config::load_env(&lookup, &env, unknown) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("sealrelay: invalid configuration:");
            for e in &errors.0 {
                eprintln!("  - {e}");
            }
            return ExitCode::FAILURE;
        }
    };

    if check_only {
        println!("{}", cfg.summary());
        return ExitCode::SUCCESS;
    }

    match runtime.block_on(sealrelay::app::serve(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sealrelay: {e:#}");
            ExitCode::FAILURE
        }
    }
}
