//! Sessions: runs that continue a conversation, across crashes, races and workers.

mod cassette;
mod crash;
mod history;
mod listing;
mod race;
mod workers;
