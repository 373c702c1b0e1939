//! The reader every section's file takes: it looks each variable up (flag or environment),
//! checks it against its [`Var`]'s kind, and collects every problem so they are reported at
//! once.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::vars::{Kind, Var};

/// Looks a variable's value up (flag or environment); `None` when unset.
pub trait Lookup {
    /// The raw value of `name`, if set.
    fn get(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> Lookup for F {
    fn get(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// Reads variables and collects every problem.
pub(crate) struct Reader<'a> {
    pub(super) lookup: &'a dyn Lookup,
    pub(super) errors: Vec<String>,
}

impl Reader<'_> {
    fn raw(&self, var: &Var) -> Option<String> {
        self.lookup.get(var.name).map(|v| v.trim().to_owned())
    }

    /// The value, or the variable's default.
    pub(crate) fn value(&self, var: &Var) -> Option<String> {
        self.raw(var).or_else(|| var.default.map(str::to_owned))
    }

    /// The value when set and not empty (no default).
    pub(crate) fn set(&self, var: &Var) -> Option<String> {
        self.raw(var).filter(|v| !v.is_empty())
    }

    /// Whether the variable is given at all (even empty).
    pub(crate) fn given(&self, var: &Var) -> bool {
        self.raw(var).is_some()
    }

    /// Records a problem with a variable's value.
    pub(crate) fn fail(&mut self, var: &Var, value: &str, allowed: &str) {
        self.errors
            .push(format!("{}={value:?} is not valid: {allowed}", var.name));
    }

    /// Records a problem in free form (it must name the variable).
    pub(crate) fn problem(&mut self, text: String) {
        self.errors.push(text);
    }

    pub(crate) fn parse<T: std::str::FromStr>(&mut self, var: &Var, allowed: &str) -> Option<T> {
        let v = self.value(var)?;
        match v.parse() {
            Ok(t) => Some(t),
            Err(_) => {
                self.fail(var, &v, allowed);
                None
            }
        }
    }

    /// An integer within the variable's bounds ([`Kind::Int`]).
    pub(crate) fn int(&mut self, var: &Var) -> u64 {
        debug_assert!(
            matches!(var.kind, Kind::Int(..)),
            "{} is not an integer",
            var.name
        );
        let (lo, hi) = match var.kind {
            Kind::Int(lo, hi) => (lo, hi),
            _ => (0, u64::MAX),
        };
        let allowed = format!("an integer from {lo} to {hi}");
        match self.parse::<u64>(var, &allowed) {
            Some(n) if (lo..=hi).contains(&n) => n,
            Some(n) => {
                self.fail(var, &n.to_string(), &allowed);
                lo
            }
            None => lo,
        }
    }

    /// A finite number within the variable's bounds ([`Kind::Float`]).
    pub(crate) fn float(&mut self, var: &Var) -> f64 {
        debug_assert!(
            matches!(var.kind, Kind::Float(..)),
            "{} is not a number",
            var.name
        );
        let (lo, hi) = match var.kind {
            Kind::Float(lo, hi) => (lo, hi),
            _ => (f64::MIN, f64::MAX),
        };
        let allowed = format!("a number from {lo} to {hi}");
        match self.parse::<f64>(var, &allowed) {
            Some(x) if x.is_finite() && x >= lo && x <= hi => x,
            Some(x) => {
                self.fail(var, &x.to_string(), &allowed);
                lo
            }
            None => lo,
        }
    }

    /// A socket address.
    pub(crate) fn addr(&mut self, var: &Var) -> SocketAddr {
        self.parse(var, "a socket address such as 0.0.0.0:8080 or [::]:8080")
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// `true`/`1` or `false`/`0`.
    pub(crate) fn bool(&mut self, var: &Var) -> bool {
        match self.value(var).as_deref() {
            Some("true") | Some("1") => true,
            Some("false") | Some("0") | Some("") | None => false,
            Some(other) => {
                let other = other.to_owned();
                self.fail(var, &other, "true or false");
                false
            }
        }
    }

    /// One of the variable's words ([`Kind::Enum`]), each mapped to the value at the same
    /// place in `values`; the first value when it is none of them.
    pub(crate) fn choice<T: Copy>(&mut self, var: &Var, values: &[T], allowed: &str) -> T {
        debug_assert!(
            matches!(var.kind, Kind::Enum(ws) if ws.len() == values.len()),
            "{}: one value per word",
            var.name
        );
        let words: &[&str] = match var.kind {
            Kind::Enum(ws) => ws,
            _ => &[],
        };
        let v = self.value(var).unwrap_or_default();
        match words.iter().zip(values).find(|(w, _)| **w == v) {
            Some((_, t)) => *t,
            None => {
                self.fail(var, &v, allowed);
                values[0]
            }
        }
    }

    /// The bytes of a secret file named by `var`, after checking who may read it: mode 0600
    /// or 0400, owned by the user the relay runs as, a regular file. It is opened once,
    /// without following a symbolic link, and the checks are made on that open file
    /// (`fstat`), so what is read is what was checked: the path cannot be swapped between the
    /// check and the read. Returned as read; each problem names the variable.
    pub(crate) fn secret_file(&mut self, var: &Var, file: &str) -> Option<Vec<u8>> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let name = var.name;
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(file);
        let mut handle = match opened {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                self.problem(format!(
                    "{name}={file:?} is a symbolic link: name the file itself"
                ));
                return None;
            }
            Err(e) => {
                self.problem(format!("{name}={file:?} cannot be read: {e}"));
                return None;
            }
        };
        let meta = match handle.metadata() {
            Ok(m) if m.is_file() => m,
            Ok(_) => {
                self.problem(format!("{name}={file:?} is not a regular file"));
                return None;
            }
            Err(e) => {
                self.problem(format!("{name}={file:?} cannot be read: {e}"));
                return None;
            }
        };
        let mode = meta.mode() & 0o7777;
        if mode != 0o600 && mode != 0o400 {
            self.problem(format!(
                "{name}={file:?} has mode {mode:04o}: it must be 0600 or 0400 (chmod 600 {file})"
            ));
            return None;
        }
        let me = crate::admin::transport::effective_uid();
        if meta.uid() != me {
            self.problem(format!(
                "{name}={file:?} is owned by uid {}, not by the relay's user (uid {me})",
                meta.uid()
            ));
            return None;
        }
        let mut bytes = Vec::new();
        if let Err(e) = handle.read_to_end(&mut bytes) {
            self.problem(format!("{name}={file:?} cannot be read: {e}"));
            return None;
        }
        Some(bytes)
    }

    /// An `https://` URL, without a trailing slash.
    pub(crate) fn https_url(&mut self, var: &Var) -> String {
        let v = self.value(var).unwrap_or_default();
        if has_userinfo(&v) {
            self.problem(format!(
                "{} carries credentials in the URL (user:password@): give the URL without them",
                var.name
            ));
            return String::new();
        }
        let ok = v
            .strip_prefix("https://")
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace));
        if !ok {
            self.fail(
                var,
                &v,
                "an https:// URL such as https://api.push.apple.com",
            );
        }
        v.trim_end_matches('/').to_owned()
    }

    /// A readable PEM file of certificates, when set.
    pub(crate) fn ca_file(&mut self, var: &Var) -> Option<PathBuf> {
        let name = var.name;
        let path = self.set(var).map(PathBuf::from)?;
        match std::fs::read_to_string(&path) {
            Ok(text) if text.contains("-----BEGIN CERTIFICATE-----") => {}
            Ok(_) => self.problem(format!(
                "{name}={} is not valid: it holds no PEM certificate",
                path.display()
            )),
            Err(e) => self.problem(format!("{name}={} cannot be read: {e}", path.display())),
        }
        Some(path)
    }
}

/// Whether a URL's authority holds user information (`scheme://user:password@host`).
pub(crate) fn has_userinfo(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.contains('@')
}
