//! The signals that stop a command gracefully: SIGINT (Ctrl-C), SIGTERM, SIGHUP.

use super::CliError;

/// The signals that stop a run: SIGINT, SIGTERM, SIGHUP. Installed before the run starts, so
/// one arriving early is handled like any other instead of killing the process.
pub(crate) struct StopSignals {
    #[cfg(unix)]
    streams: [(tokio::signal::unix::Signal, &'static str); 3],
}

impl StopSignals {
    /// Installs the handlers. Call inside the runtime, before starting or resuming the run.
    pub(crate) fn install() -> Result<StopSignals, CliError> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let install = |kind: SignalKind, name: &'static str| {
                signal(kind)
                    .map(|s| (s, name))
                    .map_err(|e| CliError::internal(format!("cannot handle {name}: {e}")))
            };
            Ok(StopSignals {
                streams: [
                    install(SignalKind::interrupt(), "SIGINT")?,
                    install(SignalKind::terminate(), "SIGTERM")?,
                    install(SignalKind::hangup(), "SIGHUP")?,
                ],
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// Waits for the next stop signal; returns its name.
    pub(crate) async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            let [(int, a), (term, b), (hup, c)] = &mut self.streams;
            tokio::select! {
                _ = int.recv() => a,
                _ = term.recv() => b,
                _ = hup.recv() => c,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}
