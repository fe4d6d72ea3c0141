//! Cassettes: recording, saving, loading, replaying, diffing and exporting a run's provider traffic.

mod child_catalogs;
mod diff;
mod export;
mod hostile;
mod normalise;
mod replay;
mod roundtrip;
mod tamper;
mod whole_run;
