//! The `sealrelay` binary: parses flags and environment, then calls into the library.

use std::collections::HashMap;
use std::process::ExitCode;

use std::path::PathBuf;

use clap::Parser;
use sealrelay::cli::args::{
    AdminCommand, Cli, ClientCommand, Command, KeygenArgs, SignersCommand, SmokeArgs,
};
use sealrelay::config::{Config, UnknownVars};

/// mimalloc: per-thread free lists without glibc's arena lock, which the runtime's worker
/// threads contended on (a request is often freed on another thread than allocated it),
/// and freed pages go back to the OS.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs a client subcommand (`keygen`, `admin`, `push`, `smoke`).
/// `server` holds the server's settings given before the subcommand or in the environment
/// (the admin socket's default path is `RELAY_ADMIN_SOCKET`'s).
fn client(
    command: ClientCommand,
    server: &HashMap<String, String>,
    runtime: &tokio::runtime::Runtime,
) -> ExitCode {
    use sealrelay::cli;
    let fail = |e: anyhow::Error, what: &str| {
        eprintln!("sealrelay {what}: {e:#}");
        ExitCode::FAILURE
    };
    match command {
        ClientCommand::Keygen(KeygenArgs { out }) => match cli::keygen::run(&out) {
            Ok(public) => {
                eprintln!("wrote {} (mode 0600); its public key:", out.display());
                println!("{public}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(e, "keygen"),
        },
        ClientCommand::Admin(sub) => {
            let socket = sub.socket.unwrap_or_else(|| {
                PathBuf::from(
                    server
                        .get("RELAY_ADMIN_SOCKET")
                        .map_or("/run/sealrelay/admin.sock", String::as_str),
                )
            });
            let client = match cli::admin::AdminClient::new(
                &socket,
                sub.url.as_deref(),
                sub.token_file.as_deref(),
            ) {
                Ok(c) => c,
                Err(e) => return fail(e, "admin"),
            };
            let answer = runtime.block_on(async {
                match sub.command {
                    AdminCommand::Signers { command } => match command {
                        SignersCommand::Add {
                            key_id,
                            public_key,
                            key,
                            topics,
                        } => {
                            let public =
                                cli::admin::public_key(public_key.as_deref(), key.as_ref())?;
                            client.enroll(&key_id, &public, &topics).await
                        }
                        SignersCommand::List { json } => client.list(json).await,
                        SignersCommand::Revoke { key_id } => client.revoke(&key_id).await,
                    },
                    AdminCommand::Receipt { push_id } => client.receipt(&push_id).await,
                }
            });
            match answer {
                Ok(a) if a.ok => {
                    println!("{}", a.text);
                    ExitCode::SUCCESS
                }
                Ok(a) => {
                    eprintln!("sealrelay admin: {}", a.text);
                    ExitCode::FAILURE
                }
                Err(e) => fail(e, "admin"),
            }
        }
        ClientCommand::Push(sub) => {
            let args = match sub.into_args() {
                Ok(a) => a,
                Err(e) => return fail(e, "push"),
            };
            let mut out = std::io::stdout();
            match runtime.block_on(cli::push::run(&args, &mut out)) {
                Ok(cli::push::Ended::Ok) => ExitCode::SUCCESS,
                Ok(cli::push::Ended::Undelivered) => ExitCode::from(2),
                Ok(cli::push::Ended::Refused) => ExitCode::FAILURE,
                Err(e) => fail(e, "push"),
            }
        }
        ClientCommand::Smoke(SmokeArgs { url }) => match runtime.block_on(cli::smoke::run(&url)) {
            Ok((status, body)) => {
                println!("{status} {body}");
                if cli::smoke::healthy(status, &body) {
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
        },
    }
}

fn main() -> ExitCode {
    let Cli { server, command } = Cli::parse();
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

    // `threads`: `None` one worker per core, `Some(1)` one thread for everything (no work
    // stealing, no wake-ups across threads), `Some(n)` n workers.
    let runtime = |threads: Option<usize>| {
        let mut builder = match threads {
            Some(1) => tokio::runtime::Builder::new_current_thread(),
            Some(n) => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(n);
                b
            }
            None => tokio::runtime::Builder::new_multi_thread(),
        };
        builder.enable_all().build().map_err(|e| {
            eprintln!("sealrelay: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
    };

    // A client subcommand ends here; the server's carry settings of their own, over those
    // given before them.
    let (check_only, server) = match command {
        None => (false, server),
        Some(Command::Serve(sub)) => (false, sub.over(&server)),
        Some(Command::CheckConfig(sub)) => (true, sub.over(&server)),
        Some(Command::Client(command)) => {
            return match runtime(None) {
                Ok(r) => client(command, &server.values(), &r),
                Err(code) => code,
            }
        }
    };
    let values = server.values();
    // The trace exporter reads the standard OTEL_* variables from the environment; a value
    // given as a flag must reach it the same way. No other thread runs yet.
    for (name, v) in &values {
        if name.starts_with("OTEL_") {
            std::env::set_var(name, v);
        }
    }
    let lookup = move |name: &str| values.get(name).cloned();

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
    // `RELAY_RUNTIME=per-core`: this thread's runtime is the first core's, single-threaded;
    // the relay starts the others on threads of their own.
    let threads = match cfg.cores() {
        Some(_) => Some(1),
        None => cfg.worker_threads(),
    };
    let runtime = match runtime(threads) {
        Ok(r) => r,
        Err(code) => return code,
    };

    match runtime.block_on(sealrelay::app::serve(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sealrelay: {e:#}");
            ExitCode::FAILURE
        }
    }
}
