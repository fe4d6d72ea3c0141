//! Sessions as the store keeps them (revision 5): which runs belong to which session, in
//! order. A run's place in its session is also in its stored spec (`session`), which its sealed
//! head covers; the store's list is what orders the runs and refuses a second "next run": a
//! session's runs are numbered 1, 2, 3, … with no gap and no repeat, whatever processes race
//! to start them. A fork is never a run of a session.

use serde::Serialize;

use crate::machine::RunId;

/// A run's place in a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionLink {
    /// The session's name.
    pub name: String,
    /// The run's position in it, from 1.
    pub index: u64,
}

/// One session, as `runtape sessions` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionRecord {
    /// Its name.
    pub name: String,
    /// How many runs it has.
    pub runs: u64,
    /// Its latest run.
    pub latest: RunId,
}
