//! OpenTelemetry export for the run-driving commands (`run`, `resume`, `fork`, `replay`):
//! when `$OTEL_EXPORTER_OTLP_ENDPOINT` is set, the runs they drive are exported as spans and
//! counters, without content ([`crate::otel`]).

use std::sync::OnceLock;

use crate::otel::Exporter;

/// The exporter of a run-driving command, when `$OTEL_EXPORTER_OTLP_ENDPOINT` is set.
static COMMAND_EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// Starts exporting (spans and counters, no content) to `$OTEL_EXPORTER_OTLP_ENDPOINT` when
/// it is set. Call before the async runtime starts; every engine [`observe_engine`] is given
/// is then exported.
pub(crate) fn start_for_command() -> Result<(), String> {
    if let Some(x) = Exporter::from_options(None, false, crate::term::note)? {
        let _ = COMMAND_EXPORTER.set(x);
    }
    Ok(())
}

/// Exports `engine`'s runs when [`start_for_command`] started an exporter. Call inside the
/// runtime, before the engine starts or takes up a run.
pub(crate) fn observe_engine(engine: &crate::exec::Engine) {
    if let Some(x) = COMMAND_EXPORTER.get() {
        x.observe_engine(engine);
    }
}

/// Ends the command's observers (inside the runtime, once the command's work is done): every
/// engine's events are forwarded and turned into spans.
pub(crate) async fn finish_for_command() {
    if let Some(x) = COMMAND_EXPORTER.get() {
        x.finish().await;
    }
}

/// Sends what the command's exporter holds (outside the runtime, before exiting).
pub(crate) fn shutdown_for_command() {
    if let Some(x) = COMMAND_EXPORTER.get() {
        x.shutdown();
    }
}
