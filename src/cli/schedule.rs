//! `runtape schedule add|ls|pause|resume|rm|trigger`: schedules in the database
//! ([`crate::ops::schedules`]); `runtape worker` and `runtape serve` fire them.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;

use super::common::{CliError, open_existing, outln, print_json};
use crate::clock::wall_ms;
use crate::ops::open_store;
use crate::ops::schedules::{self, NewSchedule, ScheduleView};
use crate::schedule::cron::parse_instant;

/// `runtape schedule ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleAction {
    /// Add a schedule: start a run of SPEC at every instant of a cron expression.
    ///
    /// `runtape worker` (SQLite or PostgreSQL) or `runtape serve` fires it. Each run is named
    /// NAME-YYYYMMDDTHHMMSSZ after its instant and records the schedule and the instant in its
    /// sealed setup.
    Add {
        /// Its name (letters, digits, '-', '_').
        name: String,
        /// The spec file each run starts from.
        spec: PathBuf,
        /// Five fields, minute first: "0 9 * * 1-5" is 09:00 Monday to Friday.
        #[arg(long)]
        cron: String,
        /// The IANA time zone the expression is read in.
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// Each run's goal (default: the spec file's).
        #[arg(long)]
        goal: Option<String>,
        /// When the previous run has not ended: skip the instant, queue it until the
        /// previous run ends, or cancel-previous and start.
        #[arg(
            long,
            default_value = "skip",
            value_name = "skip|queue|cancel-previous"
        )]
        overlap: String,
        /// Instants missed while nothing fired them (workers down, schedule paused): fire
        /// none, the last one, or all (oldest first).
        #[arg(long, default_value = "none", value_name = "none|last|all")]
        catch_up: String,
        /// Instants after this RFC 3339 time are its to fire (default: now); with
        /// --catch-up all, a backfill.
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// The schedule as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List schedules: timetable, policies, status, next fire time, last run.
    Ls {
        /// The schedules as one JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Pause a schedule: it fires nothing until resumed.
    Pause {
        /// The schedule.
        name: String,
        /// What was done as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Resume a paused schedule (instants missed meanwhile follow its --catch-up).
    Resume {
        /// The schedule.
        name: String,
        /// What was done as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Remove a schedule (its runs stay).
    Rm {
        /// The schedule.
        name: String,
        /// What was done as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Fire a schedule now, outside its timetable: the next worker or serve turn starts
    /// the run, under its overlap policy.
    Trigger {
        /// The schedule.
        name: String,
        /// The fired instant as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `runtape schedule ACTION` on the database `db`.
pub(crate) fn schedule(db: &Path, action: ScheduleAction) -> Result<(), CliError> {
    let now = wall_ms();
    match action {
        ScheduleAction::Add {
            name,
            spec,
            cron,
            tz,
            goal,
            overlap,
            catch_up,
            since,
            json,
        } => {
            let since_ms = match since.as_deref() {
                None => None,
                Some(s) => Some(parse_instant(s).ok_or_else(|| {
                    CliError::usage(format!(
                        "--since {s:?} is not an RFC 3339 time (e.g. 2026-11-30T08:00:00Z)"
                    ))
                })?),
            };
            let new = NewSchedule {
                name,
                spec,
                cron,
                tz,
                goal,
                overlap,
                catch_up,
                since_ms,
            };
            // Everything about the schedule is checked before the database is opened, so a
            // refused schedule creates no file either.
            schedules::check(&new)?;
            let store = open_store(db, true)?;
            let view = schedules::add(store.as_ref(), new, now)?;
            if json {
                return print_json(&view);
            }
            outln!(
                "added schedule {} ({} {}); next run {}",
                view.name,
                view.cron,
                view.tz,
                view.next_local.as_deref().unwrap_or("never")
            );
            Ok(())
        }
        ScheduleAction::Ls { json } => {
            let store = open_existing(db)?;
            let all = schedules::list(store.as_ref(), now)?;
            if json {
                return print_json(&all);
            }
            table(&all);
            Ok(())
        }
        ScheduleAction::Pause { name, json } => {
            schedules::set_paused(open_existing(db)?.as_ref(), &name, true)?;
            done(json, &name, "paused", &format!("paused schedule {name}"))
        }
        ScheduleAction::Resume { name, json } => {
            schedules::set_paused(open_existing(db)?.as_ref(), &name, false)?;
            done(json, &name, "resumed", &format!("resumed schedule {name}"))
        }
        ScheduleAction::Rm { name, json } => {
            schedules::remove(open_existing(db)?.as_ref(), &name)?;
            done(
                json,
                &name,
                "removed",
                &format!("removed schedule {name} (its runs stay)"),
            )
        }
        ScheduleAction::Trigger { name, json } => {
            let fired = schedules::trigger(open_existing(db)?.as_ref(), &name, now)?;
            if json {
                return print_json(&json!({"schedule": name, "fire": fired}));
            }
            outln!(
                "fired schedule {name} at {}: run {} starts at the next worker or serve turn",
                fired.instant,
                fired.run
            );
            Ok(())
        }
    }
}

/// Says what a pause, resume or rm did: one JSON object (`{"schedule", "done"}`) with
/// `json`, else `line`.
fn done(json: bool, name: &str, what: &str, line: &str) -> Result<(), CliError> {
    if json {
        return print_json(&json!({"schedule": name, "done": what}));
    }
    outln!("{line}");
    Ok(())
}

fn table(all: &[ScheduleView]) {
    if all.is_empty() {
        outln!(
            "no schedules (add one with `runtape schedule add NAME SPEC --cron \"0 9 * * 1-5\"`)"
        );
        return;
    }
    outln!(
        "{:<20}  {:<16}  {:<16}  {:<7}  {:<24}  LAST",
        "SCHEDULE",
        "CRON",
        "TZ",
        "STATUS",
        "NEXT"
    );
    for s in all {
        let last = s.last.as_ref().map_or_else(
            || "-".to_owned(),
            |l| format!("{} {} ({})", l.instant, l.run, l.state),
        );
        outln!(
            "{:<20}  {:<16}  {:<16}  {:<7}  {:<24}  {}",
            s.name,
            s.cron,
            s.tz,
            s.status,
            s.next_local.as_deref().unwrap_or("-"),
            last
        );
    }
}
