//! Bad input to `runtape eval` — a dataset line, a variant, a scorers file, a report — is one
//! line on stderr, exit 2, and changes nothing: no database is created, no run is made, no
//! report is written.

use super::{echo_dataset, echo_spec, eval, s};
use crate::support::cli::{err, one_line, temp_db, write};

#[test]
fn bad_input_is_one_line_and_changes_nothing() {
    let (dir, db) = temp_db();
    let d = dir.path();
    let spec = echo_spec(d);
    let good = echo_dataset(d);
    let out = d.join("report.json");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                write(d, "a.jsonl", "{\"goal\":\"x\"}\n{\"goal\": 3}\n")
                    .display()
                    .to_string(),
            ],
            "line 2: `goal` must be a string",
        ),
        (
            vec![
                write(d, "b.jsonl", "{\"goal\":\"x\"}\nnot json\n")
                    .display()
                    .to_string(),
            ],
            "line 2: not a JSON object",
        ),
        (
            vec![
                write(
                    d,
                    "c.jsonl",
                    "{\"id\":\"k\",\"goal\":\"x\"}\n{\"id\":\"k\",\"goal\":\"y\"}\n",
                )
                .display()
                .to_string(),
            ],
            "line 2: the id `k` is given again (first on line 1)",
        ),
        (
            vec![write(d, "d.jsonl", "\n").display().to_string()],
            "the dataset holds no items",
        ),
        (
            vec![d.join("missing.jsonl").display().to_string()],
            "cannot read the dataset",
        ),
        (
            vec![s(&good).into(), "--variant".into(), "noequals".into()],
            "--variant noequals: write NAME=SPEC",
        ),
        (
            vec![
                s(&good).into(),
                "--variant".into(),
                format!("base={}", s(&spec)),
            ],
            "a name other than `base`",
        ),
        (
            vec![
                s(&good).into(),
                "--variant".into(),
                "Bad Name=x.toml".into(),
            ],
            "--variant Bad Name=x.toml: the name must be",
        ),
        (
            vec![
                s(&good).into(),
                "--variant".into(),
                format!("v={}", s(&d.join("nope.toml"))),
            ],
            "nope.toml",
        ),
        (
            vec![
                s(&good).into(),
                "--scorers".into(),
                write(d, "s.toml", "[[scorers]]\nkind = \"regex\"\n")
                    .display()
                    .to_string(),
            ],
            "scorer `regex`: a regex scorer needs `pattern`",
        ),
        (
            vec![
                s(&good).into(),
                "--scorers".into(),
                write(
                    d,
                    "j.toml",
                    "[[scorers]]\nkind = \"judge\"\nspec = \"gone.toml\"\n",
                )
                .display()
                .to_string(),
            ],
            "gone.toml",
        ),
        (
            vec![
                s(&good).into(),
                "--baseline".into(),
                write(d, "x.json", "{}").display().to_string(),
            ],
            "is not a report `runtape eval` wrote",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec![s(&spec), "--dataset"];
        all.extend(args.iter().map(String::as_str));
        all.extend(["--out", s(&out)]);
        let (o, _) = eval(&db, &all);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            one_line(&e).contains(want),
            "{args:?}: want {want:?} in {e}"
        );
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: one line: {e}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
        assert!(!db.exists(), "{args:?}: no database was created");
        assert!(!out.exists(), "{args:?}: no report was written");
    }

    // rescore: a report that is not one, or no scorers, is refused the same way.
    super::eval_ok(&db, &[s(&spec), "--dataset", s(&good), "--out", s(&out)]);
    let before = crate::support::cli::db_files(&db);
    let scorers = write(d, "ok.toml", "[[scorers]]\nkind = \"exact\"\n");
    for (args, want) in [
        (
            vec!["rescore", s(&d.join("none.json")), "--scorers", s(&scorers)],
            "cannot read the report",
        ),
        (
            vec!["rescore", s(&good), "--scorers", s(&scorers)],
            "is not a report",
        ),
        (vec!["rescore", s(&good)], "needs --scorers"),
    ] {
        let (o, _) = eval(&db, &args);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            one_line(&e).contains(want),
            "{args:?}: want {want:?} in {e}"
        );
        assert_eq!(
            crate::support::cli::db_files(&db),
            before,
            "{args:?}: database unchanged"
        );
    }
}
