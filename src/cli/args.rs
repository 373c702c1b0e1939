//! The command line, declared with clap's derive: [`Cli`] and its subcommands.
//!
//! The server's settings ([`ServerArgs`]: one flag per variable of [`VARS`], each bound to
//! its environment variable) belong to the default run, `serve` and `check-config` only, so
//! a client subcommand's `--help` (`push`, `admin`, `keygen`, `smoke`) lists its own options
//! and nothing else. They are accepted before the subcommand too (`sealrelay
//! --relay-listen ... serve`), as they always were.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args, FromArgMatches, Parser, Subcommand};

use crate::config::{Config, Kind, VARS};

/// Push relay: forwards sealed alerts to APNs. Every flag is also an environment variable.
#[derive(Debug, Parser)]
#[command(
    name = "sealrelay",
    version,
    about = "Push relay: forwards sealed alerts to APNs. Every flag is also an environment variable."
)]
pub struct Cli {
    /// The server's settings given before the subcommand (or without one).
    #[command(flatten)]
    pub server: ServerArgs,
    /// What to do; serving when absent.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve (the default)
    Serve(ServerArgs),
    /// Validate the configuration and exit 0 or 1 with the reasons
    CheckConfig(ServerArgs),
    /// The binary as a client of a relay.
    #[command(flatten)]
    Client(ClientCommand),
}

/// The subcommands that talk to a relay (or write a key) and take no server settings.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// POST one well-formed envelope for a random device; exit 0 on a healthy answer (410 BadDeviceToken against real credentials, 202 forwarded in dry run)
    Smoke(SmokeArgs),
    /// Write a new Ed25519 signer key (PKCS#8 PEM, mode 0600) and print its public key for enrolment
    Keygen(KeygenArgs),
    /// The admin API: signers and receipts, over the admin socket (or --url and --token-file)
    Admin(AdminArgs),
    /// Sign one push and send it to /v2/pushes; print the receipt; with --wait follow it until settled. A 503, a timeout or a lost connection sends the same signed bytes again (up to 5 times, backing off); a request id already used reads its receipt
    Push(PushArgs),
}

/// `sealrelay smoke <url>`.
#[derive(Debug, Args)]
pub struct SmokeArgs {
    /// The relay's URL, e.g. http://127.0.0.1:8080/
    pub url: String,
}

/// `sealrelay keygen [--out FILE]`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Where to write the key; an existing file is never overwritten
    #[arg(long, default_value = "sealrelay-signer.pem")]
    pub out: PathBuf,
}

/// `sealrelay admin [--socket PATH | --url URL --token-file FILE] ...`.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The admin socket [default: RELAY_ADMIN_SOCKET's value]
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// The admin API over loopback TCP, e.g. http://127.0.0.1:9091 (RELAY_ADMIN_API_LISTEN)
    #[arg(long)]
    pub url: Option<String>,
    /// The bearer token file, with --url (RELAY_ADMIN_TOKEN_FILE)
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// What to ask the admin API.
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// The admin API's subcommands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Enrol, list and revoke signers
    Signers {
        /// What to do with them.
        #[command(subcommand)]
        command: SignersCommand,
    },
    /// Print any push's receipt
    Receipt {
        /// The push's id, as `push` printed it.
        push_id: String,
    },
}

/// `sealrelay admin signers ...`.
#[derive(Debug, Subcommand)]
pub enum SignersCommand {
    /// Enrol a signer, or update its key and topics
    Add {
        /// The signer's key id, ed25519:<name>
        key_id: String,
        /// Its public key: standard base64 of 32 bytes (what keygen prints)
        #[arg(long)]
        public_key: Option<String>,
        /// Or its private key file, to derive the public key from
        #[arg(long)]
        key: Option<PathBuf>,
        /// An APNs topic it may push to (repeat for more)
        #[arg(long = "topic", value_name = "TOPIC", required = true)]
        topics: Vec<String>,
    },
    /// List the signers
    List {
        /// Print the API's JSON
        #[arg(long)]
        json: bool,
    },
    /// Revoke a signer (effective on every replica within a second)
    Revoke {
        /// The signer's key id, ed25519:<name>
        key_id: String,
    },
}

/// `sealrelay push ...`: the flags of [`crate::cli::push::Args`].
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The relay's public URL
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The signer's private key file (from keygen)
    #[arg(long)]
    pub key: PathBuf,
    /// The signer's enrolled key id, ed25519:<name>
    #[arg(long)]
    pub key_id: String,
    /// <device token hex>=<ciphertext base64>; repeat for up to 100 devices
    #[arg(long = "target", value_name = "TARGET", required = true)]
    pub targets: Vec<String>,
    /// The APNs topic [default: the relay's APNS_TOPIC]
    #[arg(long)]
    pub topic: Option<String>,
    /// The ciphertexts' suite, e.g. x25519
    #[arg(long)]
    pub suite: Option<String>,
    /// 32 lowercase hex [default: random]
    #[arg(long)]
    pub collapse_id: Option<String>,
    /// 32 lowercase hex
    #[arg(long)]
    pub flap_id: Option<String>,
    /// time-sensitive or passive
    #[arg(long, default_value = "time-sensitive", value_parser = ["time-sensitive", "passive"])]
    pub priority: String,
    /// The alert is an event, not a state change
    #[arg(long)]
    pub event: bool,
    /// A lowercase UUID [default: random]. Its signed request is kept beside the key (<KEY>.requests/<ID>.json, or --save), so the same command with the same id resends those exact bytes and gets the same receipt (200), never a second push
    #[arg(long)]
    pub request_id: Option<String>,
    /// Keep the signed request in FILE (resent as it is when FILE exists)
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Follow the push's events until it is settled
    #[arg(long)]
    pub wait: bool,
    /// How long --wait follows the push, in seconds
    #[arg(long, default_value_t = 900)]
    pub wait_timeout_s: u64,
}

impl PushArgs {
    /// The client's arguments; a `--target` without its `=` is refused, naming it.
    pub fn into_args(self) -> anyhow::Result<crate::cli::push::Args> {
        let mut targets = Vec::with_capacity(self.targets.len());
        for t in &self.targets {
            match t.split_once('=') {
                Some((d, c)) => targets.push((d.to_owned(), c.to_owned())),
                None => {
                    anyhow::bail!("--target {t:?}: expected <device token hex>=<ciphertext base64>")
                }
            }
        }
        Ok(crate::cli::push::Args {
            url: self.url,
            key: self.key,
            key_id: self.key_id,
            topic: self.topic,
            targets,
            suite: self.suite,
            collapse_id: self.collapse_id,
            flap_id: self.flap_id,
            priority: self.priority,
            event: self.event,
            request_id: self.request_id,
            save: self.save,
            wait: self.wait,
            wait_timeout: Duration::from_secs(self.wait_timeout_s),
        })
    }
}

/// The server's settings: one flag per variable of [`VARS`] (`RELAY_LISTEN` is
/// `--relay-listen`, [`Config::flag_name`]), each also read from its variable. Declared from
/// the table rather than field by field, so a new variable is a new flag with nothing else
/// to write.
#[derive(Debug, Clone, Default)]
pub struct ServerArgs {
    /// Values given as flags.
    flags: HashMap<&'static str, String>,
    /// Values clap took from the environment.
    env: HashMap<&'static str, String>,
}

impl ServerArgs {
    /// These settings over `base` (the ones given before the subcommand): a flag wins over
    /// the environment, and a flag after the subcommand over one before it.
    pub fn over(mut self, base: &ServerArgs) -> ServerArgs {
        for (name, v) in &base.flags {
            self.flags.entry(name).or_insert_with(|| v.clone());
        }
        for (name, v) in &base.env {
            self.env.entry(name).or_insert_with(|| v.clone());
        }
        self
    }

    /// Every variable that has a value, as a flag or in the environment, by name.
    pub fn values(&self) -> HashMap<String, String> {
        let mut out: HashMap<String, String> = self
            .env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        out.extend(self.flags.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        out
    }
}

impl FromArgMatches for ServerArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = ServerArgs::default();
        args.update_from_arg_matches(matches)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for v in VARS {
            let Ok(Some(value)) = matches.try_get_one::<String>(v.name) else {
                continue;
            };
            match matches.value_source(v.name) {
                Some(ValueSource::CommandLine) => self.flags.insert(v.name, value.clone()),
                _ => self.env.insert(v.name, value.clone()),
            };
        }
        Ok(())
    }
}

/// A variable's help as plain text: the reference's Markdown without its code marks, and
/// links reduced to their text.
fn plain(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut rest = markdown;
    while let Some(open) = rest.find('[') {
        let (before, after) = rest.split_at(open);
        out.push_str(before);
        let link = after.find("](").and_then(|mid| {
            let close = after[mid..].find(')')? + mid;
            Some((&after[1..mid], close))
        });
        match link {
            Some((text, close)) => {
                out.push_str(text);
                rest = &after[close + 1..];
            }
            None => {
                out.push('[');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out.replace('`', "")
}

impl Args for ServerArgs {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for v in VARS {
            // Built once per command at start-up: the flag names live as long as the process.
            let flag: &'static str = Box::leak(Config::flag_name(v.name).into_boxed_str());
            let mut help = plain(v.help);
            if matches!(
                v.kind,
                Kind::Int(..) | Kind::Float(..) | Kind::Enum(_) | Kind::Text(..)
            ) {
                help.push_str(&format!(" [allowed: {}]", plain(&v.kind.allowed())));
            }
            if let Some(d) = v.default {
                help.push_str(&format!(" [default: {d}]"));
            }
            cmd = cmd.arg(
                clap::Arg::new(v.name)
                    .long(flag)
                    .env(v.name)
                    .hide_env_values(true)
                    .action(ArgAction::Set)
                    .help(help),
            );
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Command};

    #[test]
    fn help_is_plain_text() {
        assert_eq!(
            super::plain("Forms in [Redis URLs](#redis-urls); `json` or [x"),
            "Forms in Redis URLs; json or [x"
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn server_flags_before_and_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "sealrelay",
            "--relay-listen",
            "127.0.0.1:1",
            "--relay-rate-capacity",
            "9",
            "check-config",
            "--relay-rate-capacity",
            "7",
        ])
        .unwrap();
        let Some(Command::CheckConfig(sub)) = cli.command else {
            panic!("check-config expected");
        };
        let values = sub.over(&cli.server).values();
        assert_eq!(values["RELAY_LISTEN"], "127.0.0.1:1");
        assert_eq!(values["RELAY_RATE_CAPACITY"], "7");
    }

    #[test]
    fn client_subcommands_take_no_server_flags() {
        let e =
            Cli::try_parse_from(["sealrelay", "keygen", "--redis-url", "redis://x"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    }
}
