//! `verify` and `resume` of a run another process is driving right now: the run moves on
//! between the reads, which must never be mistaken for tampering — every `verify` passes, and
//! a second `resume` is refused because the run is being driven, not because it "does not
//! match its sealed head". The real binary on a real SQLite file.

use crate::support;
use support::cli::{runtape, start_json, temp_spec};

#[test]
fn a_run_being_driven_verifies_at_every_moment_and_is_not_taken_as_tampered() {
    let (_dir, db, spec_path) = temp_spec("slow.toml", &support::tamper::notes_spec(40, false, 15));
    // The run id is the first JSON line.
    let (mut child, mut stdout, run) = start_json(&db, &spec_path);
    // The id is announced before the run is stored; wait for its first committed step.
    let mut line = String::new();
    while !line.contains("\"transition\"") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stdout, &mut line).expect("reads");
        assert!(n > 0, "the run ended before its first step");
    }
    let drain = std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));

    let (mut verified, mut refused) = (0, 0);
    while child.try_wait().expect("polls").is_none() {
        let v = runtape(&db, &["verify", &run]);
        assert!(
            v.status.success(),
            "verify of a live run: {}",
            String::from_utf8_lossy(&v.stderr)
        );
        verified += 1;
        let r = runtape(&db, &["resume", &run]);
        let err = String::from_utf8_lossy(&r.stderr);
        if !r.status.success() {
            assert!(
                !err.contains("sealed head"),
                "a live run was taken as tampered: {err}"
            );
            refused += 1;
        }
    }
    drain.join().expect("joins").expect("drains");
    assert!(
        verified > 0 && refused > 0,
        "{verified} verifies, {refused} refusals"
    );
    let v = runtape(&db, &["verify", &run]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}
