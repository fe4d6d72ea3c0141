//! A delegate given as another spec file (`delegates = [{ spec = "review.toml", as = "review" }]`)
//! with the real binary on real SQLite files: the example end to end (the child runs the other
//! file's agents and plan, its answer is the call's result, `verify --recursive`), a paused tree
//! resumed after the file is deleted, and each load error as one line naming the field.

use crate::support;

use crate::support::cli::{example, ran_example, temp_db, utf8};
use support::delegation::*;

/// The review team of `examples/review.toml`, each scripted reply taking `latency_ms`.
fn review(latency_ms: u64) -> String {
    std::fs::read_to_string(example("review.toml"))
        .expect("reads examples/review.toml")
        .replace("latency_ms = 20", &format!("latency_ms = {latency_ms}"))
}

/// `examples/writer.toml`, its delegates entry replaced by `delegates`.
fn writer(delegates: &str) -> String {
    std::fs::read_to_string(example("writer.toml"))
        .expect("reads examples/writer.toml")
        .replace(
            r#"delegates = [{ spec = "review.toml", as = "review" }]"#,
            &format!("delegates = {delegates}"),
        )
}

#[test]
fn a_run_delegates_to_another_spec_file_end_to_end() {
    let (_dir, db, printed) = ran_example("writer.toml");
    assert!(printed.contains("answer: RELEASE NOTE:"), "{printed}");

    let (parent, id) = root_and_id(&db, "the writer's run");
    assert_eq!(parent["status"], "completed");
    let children = children_of(&db, &id);
    assert_eq!(children.len(), 1, "{children:?}");
    let child = &children[0];
    assert_eq!(child["status"], "completed");
    assert_eq!(child["goal"], "Review this draft: 2.0 is faster.");
    let child_id = child["id"].as_str().expect("id");

    // The child ran review.toml's two agents along its plan: critic, then editor.
    let child_log = ok(&db, &["log", child_id]);
    assert!(
        child_log.contains("critic") && child_log.contains("editor"),
        "{child_log}"
    );
    // The editor's verdict came back to the writer as the call's result.
    let log = ok(&db, &["log", &id]);
    assert!(
        log.contains(&format!("child {child_id} ended: answer: VERDICT: approve")),
        "{log}"
    );
    // The child's spend is charged to the parent: 90+15 + 120+25 tokens.
    assert_eq!(child["tokens"], 250);
    assert_eq!(parent["tokens"], 230 + 280 + 250);

    let verified = ok(&db, &["verify", &id, "--recursive"]);
    assert_eq!(
        verified.lines().filter(|l| l.starts_with("OK: ")).count(),
        2,
        "{verified}"
    );
}

#[test]
fn a_paused_tree_resumes_after_the_delegate_spec_file_is_deleted() {
    let (dir, db) = temp_db();
    let review_file = write(dir.path(), "review.toml", &review(400));
    let parent_file = write(
        dir.path(),
        "writer.toml",
        &writer(r#"[{ spec = "review.toml", as = "review" }]"#),
    );
    let (id, status) = paused_with_children(&db, &parent_file, 1);
    assert_eq!(status.code(), Some(4), "exit 4: paused");
    assert_eq!(root(&db).expect("parent")["status"], "paused");

    // Neither file is needed any more: the child's spec is stored with the parent's run.
    std::fs::remove_file(&review_file).expect("deletes review.toml");
    std::fs::remove_file(&parent_file).expect("deletes writer.toml");
    let printed = ok(&db, &["resume", &id]);
    assert!(printed.contains("answer: RELEASE NOTE:"), "{printed}");
    let children = children_of(&db, &id);
    assert_eq!(children.len(), 1, "the same child, resumed");
    assert_eq!(children[0]["status"], "completed");
    ok(&db, &["verify", &id, "--recursive"]);
}

/// Loads `writer.toml` (with `delegates`) next to `files`, expecting it refused; returns the
/// one-line message.
fn refused(delegates: &str, files: &[(&str, &str)]) -> String {
    let (dir, db) = temp_db();
    for (name, body) in files {
        write(dir.path(), name, body);
    }
    let parent = write(dir.path(), "writer.toml", &writer(delegates));
    let o = runtape(&db, &["run", utf8(&parent)]);
    assert!(!o.status.success(), "refused");
    assert!(!db.exists() || runs(&db).is_empty(), "nothing started");
    let err = String::from_utf8_lossy(&o.stderr).trim().to_owned();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn each_load_error_is_one_line_naming_the_field_and_starts_nothing() {
    let ok_review = review(20);

    let e = refused(r#"[{ spec = "missing.toml", as = "review" }]"#, &[]);
    assert!(e.contains("agents[0].delegates[0].spec"), "{e}");
    assert!(e.contains("missing.toml"), "{e}");

    let e = refused(
        r#"[{ spec = "review.toml", as = "review" }]"#,
        &[(
            "review.toml",
            "[[agents]]\nid = \"critic\"\nprovider = \"nowhere\"\n",
        )],
    );
    assert!(e.contains("agents[0].delegates[0].spec"), "{e}");
    assert!(e.contains("invalid") && e.contains("nowhere"), "{e}");

    let e = refused(
        r#"[{ spec = "review.toml", as = "review" }]"#,
        &[("review.toml", "this is not = = toml")],
    );
    assert!(e.contains("agents[0].delegates[0].spec"), "{e}");

    // review.toml delegates back to writer.toml: a cycle of spec files.
    let cyclic = ok_review.replace(
        "id = \"editor\"\n",
        "id = \"editor\"\ndelegates = [{ spec = \"writer.toml\", as = \"writing\" }]\n",
    );
    let e = refused(
        r#"[{ spec = "review.toml", as = "review" }]"#,
        &[("review.toml", &cyclic)],
    );
    assert!(e.contains("cycle"), "{e}");
    assert!(e.contains("writer.toml → review.toml → writer.toml"), "{e}");

    // A malformed entry, and an `as` that cannot be a tool name.
    let e = refused(
        r#"[{ spec = "review.toml" }]"#,
        &[("review.toml", &ok_review)],
    );
    assert!(
        e.contains("agents[0].delegates[0].as: missing field `as`"),
        "{e}"
    );
    let e = refused(
        r#"[{ spec = "review.toml", as = "re view" }]"#,
        &[("review.toml", &ok_review)],
    );
    assert!(e.contains("agents[0].delegates[0].as"), "{e}");
    assert!(e.contains("not a valid tool name"), "{e}");

    // `as` clashes with an agent of the file.
    let e = refused(
        r#"[{ spec = "review.toml", as = "writer" }]"#,
        &[("review.toml", &ok_review)],
    );
    assert!(e.contains("agents[0].delegates[0].as"), "{e}");
    assert!(e.contains("also an agent"), "{e}");

    // `as` clashes with a tool of the file.
    let with_tool = |delegates: &str| {
        format!(
            "{}\n[[tools]]\nname = \"review\"\nkind = \"human\"\n",
            writer(delegates)
        )
    };
    let (dir, db) = temp_db();
    write(dir.path(), "review.toml", &ok_review);
    let parent = write(
        dir.path(),
        "writer.toml",
        &with_tool(r#"[{ spec = "review.toml", as = "review" }]"#),
    );
    let o = runtape(&db, &["run", utf8(&parent)]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("agents[0].delegates[0].as"), "{e}");
    assert!(e.contains("a tool of this file"), "{e}");

    // A provider of the same name but a different definition.
    let clash = ok_review.replace("review-script", "script");
    let e = refused(
        r#"[{ spec = "review.toml", as = "review" }]"#,
        &[("review.toml", &clash)],
    );
    assert!(
        e.contains("provider `script`") && e.contains("rename"),
        "{e}"
    );
}
