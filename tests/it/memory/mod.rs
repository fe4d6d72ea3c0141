//! Memory (revision 5): in the machine, across processes, crashes, forks, cassettes and serve.

mod cassette;
mod crash;
mod fork;
mod global_cap;
mod global_processes;
mod machine;
mod serve;
