//! The smallest transition caps end a run cleanly, with the real binary: `max_transitions` of
//! 1, 2 and 3 fail the run with `transition_cap` (exit 1), leave it `failed` with its lease
//! released, and the history verifies. A cap of 1 used to wedge the run in `running`
//! (`created --start--> done` was not an edge of the table).

use crate::support;

use crate::support::cli::{temp_db, utf8};
use support::protocol::*;

#[test]
fn caps_of_one_two_and_three_fail_the_run_cleanly() {
    let (dir, db) = temp_db();
    for cap in [1u64, 2, 3] {
        let spec = dir.path().join(format!("cap{cap}.toml"));
        std::fs::write(
            &spec,
            format!(
                "goal = \"g\"\n[run]\nmax_transitions = {cap}\n\
                 [[providers]]\nname = \"s\"\nkind = \"scripted\"\nreplies = [{{ text = \"hi\" }}]\n\
                 [[agents]]\nid = \"a\"\nprovider = \"s\"\n"
            ),
        )
        .expect("writes");
        let o = runtape(&db, &["run", utf8(&spec)]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "cap {cap}: {}{}",
            out(&o),
            err(&o)
        );
        assert!(
            out(&o).contains("failed (transition_cap)"),
            "cap {cap}: {}",
            out(&o)
        );
        assert!(err(&o).is_empty(), "cap {cap}: {}", err(&o));
        let run = run_id(&o);
        let row = run_row(&db, &run);
        assert_eq!(row.status, "failed", "cap {cap}: {row:?}");
        assert_eq!(row.seq, cap as i64, "cap {cap}: exactly {cap} transitions");
        assert_eq!(row.owner, None, "cap {cap}: lease released");
        let v = runtape(&db, &["verify", &run]);
        assert!(v.status.success(), "cap {cap}: {}", out(&v));
        let r = runtape(&db, &["resume", &run]);
        assert_eq!(r.status.code(), Some(2), "cap {cap}: nothing to resume");
    }
}
