//! Reading the store from async code: [`Store`] reads are blocking calls (SQLite reads a page
//! from disk, a server store waits on the network), so the executor makes them on tokio's
//! blocking pool, never on a worker thread that drives runs.

use std::sync::Arc;

use super::EngineError;
use crate::store::Store;

/// Runs `f` against `store` on tokio's blocking pool and returns what it returns.
pub(crate) async fn off_thread<T, E>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, E> + Send + 'static,
) -> Result<T, EngineError>
where
    T: Send + 'static,
    E: Into<EngineError> + Send + 'static,
{
    let store = store.clone();
    match tokio::task::spawn_blocking(move || f(store.as_ref())).await {
        Ok(result) => result.map_err(Into::into),
        Err(e) => Err(EngineError::ReadStopped {
            reason: e.to_string(),
        }),
    }
}
