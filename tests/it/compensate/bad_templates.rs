//! A compensation that cannot work is refused when the spec is loaded, in one line naming
//! where, and no run is created.

use crate::support::cli::{err, runtape, temp_db, utf8, write};

#[test]
fn bad_compensations_are_refused_at_load_in_one_line() {
    for (compensate, expected) in [
        (
            r#"{ tool = "delete", arguments = { name = "{res.name}" } }"#,
            "tools[0].compensate.arguments: `{res.name}`: `{res.name}` must start with `args` or `result`",
        ),
        (
            r#"{ tool = "delete", arguments = { name = "{result.name" } }"#,
            "is not closed",
        ),
        (
            r#"{ tool = "remove", arguments = {} }"#,
            "tools[0].compensate.tool: `remove` is not a tool of this spec",
        ),
        (r#"{ tool = "delete", undo = 1 }"#, "undo"),
    ] {
        let (dir, db) = temp_db();
        let spec = write(
            dir.path(),
            "bad.toml",
            &format!(
                "goal = \"g\"\n[run]\non_failure = \"compensate\"\n\
                 [[providers]]\nname = \"s\"\nkind = \"scripted\"\nreplies = [{{ text = \"hi\" }}]\n\
                 [[tools]]\nname = \"create\"\ncommand = [\"cat\"]\ncompensate = {compensate}\n\
                 [[tools]]\nname = \"delete\"\ncommand = [\"cat\"]\n\
                 [[agents]]\nid = \"a\"\nprovider = \"s\"\n"
            ),
        );
        let o = runtape(&db, &["run", utf8(&spec)]);
        assert_eq!(o.status.code(), Some(2), "{compensate}: {}", err(&o));
        let stderr = err(&o);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{compensate}: {stderr}");
        assert!(!db.exists(), "nothing is written");
    }
}
