//! A fork's edits read as words wherever the fork is shown: `show FORK@N` of the edited step,
//! `log FORK` and `diff RUN FORK` name what changed, and `ls` (and `ls --json`) give the fork
//! the goal its edit wrote, while the parent keeps its own. A fork that only changed a budget
//! keeps its parent's goal.

use crate::support::cli::{example, json_lines, ok, run_id, runtape, temp_db, utf8};

#[test]
fn a_forks_edit_is_shown_in_words_and_its_goal_is_its_own() {
    let (_dir, db) = temp_db();
    let run = run_id(&runtape(&db, &["run", utf8(&example("quickstart.toml"))]));
    let asked = "Count the words of 'a b c' instead.";
    let fork = run_id(&runtape(
        &db,
        &[
            "fork",
            &format!("{run}@1"),
            "--edit",
            &format!("user={asked}"),
        ],
    ));
    let words = format!("assistant's conversation goes on with user \"{asked}\"");

    let show = ok(&db, &["show", &format!("{fork}@2")]);
    assert!(show.contains(&format!("\nedit    {words}\n")), "{show}");
    let log = ok(&db, &["log", &fork]);
    assert!(log.contains(&format!("fork edit: {words}")), "{log}");
    assert!(
        log.lines().next().is_some_and(|l| l.ends_with(asked)),
        "{log}"
    );
    let diff = ok(&db, &["diff", &run, &fork]);
    assert!(diff.contains(&format!("{fork} edits: {words}")), "{diff}");

    let budget = run_id(&runtape(
        &db,
        &["fork", &format!("{run}@1"), "--edit", "budget.max_turns=5"],
    ));
    let show = ok(&db, &["show", &format!("{budget}@2")]);
    assert!(show.contains("\nedit    turns budget set to 5\n"), "{show}");

    let listed = json_lines(&runtape(&db, &["ls", "--json"]));
    let goal = |id: &str| {
        listed
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| r["goal"].as_str().unwrap_or_default().to_owned())
            .expect("listed")
    };
    assert_eq!(goal(&fork), asked);
    let parents = "What time is it in UTC, and how many words are in 'runtape keeps every step'?";
    assert_eq!(goal(&run), parents);
    assert_eq!(goal(&budget), parents, "a budget edit asks nothing new");
}
