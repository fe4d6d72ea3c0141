//! The application layer: every operation a front end offers on runs, for the `runtape`
//! command, its HTTP server and programs embedding runtape alike.

pub mod json;
