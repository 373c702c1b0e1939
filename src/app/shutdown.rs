//! SIGTERM and SIGINT, installed before anything serves.

/// The process's shutdown signals.
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; an error is a start-up error.
    pub fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let term = signal(SignalKind::terminate())
                .map_err(|e| anyhow::anyhow!("cannot install the SIGTERM handler: {e}"))?;
            let int = signal(SignalKind::interrupt())
                .map_err(|e| anyhow::anyhow!("cannot install the SIGINT handler: {e}"))?;
            Ok(Self { term, int })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// Waits for the next signal; its name.
    pub async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.int.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "ctrl-c"
        }
    }
}
