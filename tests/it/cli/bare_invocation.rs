//! `runtape` with no arguments prints the short usage and where to go next, on lines of their
//! own on stderr (not the whole help squeezed into one error line), and exits 2.

use crate::support::cli::{bare, err, out};

#[test]
fn runtape_alone_prints_the_short_usage_and_exits_2() {
    let o = bare(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert_eq!(out(&o), "", "nothing on stdout");
    let stderr = err(&o);
    let first = stderr.lines().next().unwrap_or_default();
    assert_eq!(first, "Usage: runtape [OPTIONS] <COMMAND>", "{stderr}");
    assert!(stderr.contains("`runtape help`"), "{stderr}");
    assert!(
        stderr.lines().count() <= 6,
        "the short usage, not the command list: {stderr}"
    );
    assert!(
        !stderr.contains("Continue a run that stopped"),
        "no command descriptions: {stderr}"
    );
}
