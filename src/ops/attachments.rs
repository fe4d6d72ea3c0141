//! Files given with a goal (`runtape run --attach FILE`): read, checked, and added to the
//! spec the run is created with.
//!
//! A file is taken when its first bytes say it is a PNG, JPEG, GIF, WebP image or a PDF
//! (its name and extension are not trusted) and it is at most [`MAX_ATTACHMENT_BYTES`]. Its
//! [`Attachment`] goes into the spec's `attachments` (so the run's sealed head covers it) and
//! its bytes to the run's first transition, which stores them as a blob.

use std::path::{Path, PathBuf};

use super::OpsError;
use crate::config::RunFile;
use crate::machine::attachment::{MEDIA_TYPES, sniff_media_type};
use crate::machine::{Attachment, RunSpec};

pub use crate::machine::attachment::MAX_ATTACHMENT_BYTES;

/// Reads every file of `paths`, checks it, and adds it to `file`'s spec (in order) with its
/// bytes kept in [`RunFile::files`]. On an error (a file missing, too large, or of a kind not
/// taken) `file` is unchanged and nothing has been written.
pub fn attach(file: &mut RunFile, paths: &[PathBuf]) -> Result<(), OpsError> {
    if paths.is_empty() {
        return Ok(());
    }
    let read = read_all(paths)?;
    let mut spec = file.spec.spec().clone();
    for (attachment, _) in &read {
        spec.attachments.push(attachment.clone());
    }
    file.spec = RunSpec::build(spec).map_err(|e| bad(format!("the spec with attachments: {e}")))?;
    file.files.extend(read.into_iter().map(|(_, bytes)| bytes));
    Ok(())
}

/// Every file of `paths`, read and checked, in order: the first refused stops the reading.
pub(super) fn read_all(paths: &[PathBuf]) -> Result<Vec<(Attachment, Vec<u8>)>, OpsError> {
    paths.iter().map(|p| read_one(p)).collect()
}

/// One file: its attachment and bytes, or the one line saying why it is refused.
fn read_one(path: &Path) -> Result<(Attachment, Vec<u8>), OpsError> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| bad(format!("--attach {shown}: cannot read it ({e})")))?;
    if !meta.is_file() {
        return Err(bad(format!("--attach {shown}: not a file")));
    }
    if meta.len() > MAX_ATTACHMENT_BYTES {
        return Err(bad(format!(
            "--attach {shown}: {} bytes, more than the {} MiB a file may have",
            meta.len(),
            MAX_ATTACHMENT_BYTES / (1024 * 1024)
        )));
    }
    let bytes =
        std::fs::read(path).map_err(|e| bad(format!("--attach {shown}: cannot read it ({e})")))?;
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return Err(bad(format!(
            "--attach {shown}: it grew past the size limit while read"
        )));
    }
    let Some(media_type) = sniff_media_type(&bytes) else {
        return Err(bad(format!(
            "--attach {shown}: not an image or PDF runtape takes (its bytes are none of {})",
            MEDIA_TYPES.join(", ")
        )));
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    Ok((Attachment::of(media_type, &bytes, name), bytes))
}

fn bad(why: String) -> OpsError {
    OpsError::BadOverride(why)
}
