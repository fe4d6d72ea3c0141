//! When SQLite cannot write for want of room, saying which room: the disk, or the size cap the
//! database was opened with.
//!
//! SQLite reports a write past `max_page_count` and most writes to a full disk as
//! `SQLITE_FULL` ("database or disk is full"), but a full disk met while it grows its
//! shared-memory index (`-shm`), syncs or truncates comes back as `SQLITE_IOERR` ("disk I/O
//! error"), which reads as damaged hardware. [`full`] tells them apart by asking the file
//! system how much room is left where the database lives.

use std::path::Path;

use rusqlite::ErrorCode;

use super::super::StoreError;

/// A disk with less free room than this counts as full: more than any one thing SQLite grows
/// by when the error is not `SQLITE_FULL` (a 32 KiB `-shm` region, a page, a sync), so an I/O
/// error on a disk with more room left is a real I/O error.
const NEARLY_FULL_BYTES: u64 = 1 << 20;

/// SQLite's message for `SQLITE_IOERR` and its extended codes (`rusqlite` shows it as is).
pub(super) const IO_ERROR_TEXT: &str = "disk I/O error";

/// The database file a connection writes, as errors name it, and the size cap it was opened
/// with ([`super::SqliteStore::open_capped`]).
#[derive(Clone, Debug)]
pub(super) struct DbFile {
    /// The path, as shown in errors.
    pub(super) shown: String,
    /// The size cap in bytes, if one was set.
    pub(super) cap_bytes: Option<u64>,
}

/// `code` (with SQLite's words `detail`) met writing the database `shown` (capped at
/// `cap_bytes`, if set) as [`StoreError::Full`] when it is a lack of room; `None` otherwise.
///
/// `SQLITE_FULL` is the disk unless a cap is set and the disk has room left. `SQLITE_IOERR` is
/// the disk when the disk has (next to) no room left, and otherwise not a lack of room at
/// all. Reads the file system's free space only for these two codes.
pub(in crate::store) fn full(
    shown: &str,
    cap_bytes: Option<u64>,
    code: Option<ErrorCode>,
    detail: &str,
) -> Option<StoreError> {
    let disk_full = || free_bytes(Path::new(shown)).is_some_and(|b| b < NEARLY_FULL_BYTES);
    let cap_bytes = match code? {
        ErrorCode::DiskFull => cap_bytes.filter(|_| !disk_full()),
        ErrorCode::SystemIoFailure if disk_full() => None,
        _ => return None,
    };
    Some(StoreError::Full {
        path: shown.to_owned(),
        detail: detail.to_owned(),
        cap_bytes,
    })
}

/// The bytes an unprivileged process may still write on the file system holding `path` (or,
/// before the file exists, its directory); `None` when the system does not say.
fn free_bytes(path: &Path) -> Option<u64> {
    #[cfg(unix)]
    {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let stat = rustix::fs::statvfs(path)
            .or_else(|_| rustix::fs::statvfs(dir.unwrap_or(Path::new("."))))
            .ok()?;
        Some(stat.f_bavail.saturating_mul(stat.f_frsize))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_error_with_room_left_is_the_cap_only_when_there_is_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("runs.db");
        let shown = path.display().to_string();
        if free_bytes(&path).is_none_or(|b| b < NEARLY_FULL_BYTES) {
            eprintln!("skipped: the temporary directory's disk is (nearly) full");
            return;
        }
        let capped = full(&shown, Some(4096), Some(ErrorCode::DiskFull), "full");
        assert!(
            matches!(
                capped,
                Some(StoreError::Full {
                    cap_bytes: Some(4096),
                    ..
                })
            ),
            "{capped:?}"
        );
        let uncapped = full(&shown, None, Some(ErrorCode::DiskFull), "full");
        assert!(
            matches!(
                uncapped,
                Some(StoreError::Full {
                    cap_bytes: None,
                    ..
                })
            ),
            "{uncapped:?}"
        );
        let line = uncapped.map(|e| e.to_string()).unwrap_or_default();
        assert!(line.starts_with("disk full: "), "{line}");
        assert!(line.contains(&shown), "{line}");
        assert_eq!(
            full(
                &shown,
                None,
                Some(ErrorCode::SystemIoFailure),
                IO_ERROR_TEXT
            ),
            None,
            "an I/O error on a disk with room is not a lack of room"
        );
        assert_eq!(
            full(&shown, None, Some(ErrorCode::ConstraintViolation), "x"),
            None
        );
    }
}
