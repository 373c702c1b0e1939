//! The `sealrelay` binary: parses flags and environment, then calls into the library.

use std::collections::HashMap;
use std::process::ExitCode;

use clap::{Arg, ArgAction, Command};
use sealrelay::config::{Config, VARS};

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
        );
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

fn main() -> ExitCode {
    let matches = cli().get_matches();
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
    let lookup = move |name: &str| values.get(name).cloned();

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

    let cfg = match Config::load(&lookup) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("sealrelay: invalid configuration:");
            for e in &errors.0 {
                eprintln!("  - {e}");
            }
            return ExitCode::FAILURE;
        }
    };

    if let Some(("check-config", _)) = matches.subcommand() {
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
