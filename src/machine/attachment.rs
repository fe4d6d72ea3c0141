//! Files a message carries beside its text: images and PDFs, by reference.
//!
//! A message never holds a file's bytes. It holds an [`Attachment`]: the media type, the
//! size, a name for people, and the blake3 [`Digest`] of the bytes, which the store keeps once
//! as a content-addressed blob. The digest is part of the message's canonical bytes, so the
//! conversation head, and so the history `verify` checks, commits to the file; `verify` reads
//! each attachment's blob and refuses one whose bytes do not hash to it.
//!
//! Which media types a model may be sent is the provider's business (see
//! `provider::http::Accepts`); for a model that takes none, [`Attachment::placeholder`] is the
//! text sent in its place.

use serde::{Deserialize, Serialize};

use super::ids::Digest;

/// The media types runtape accepts as attachments, as their bytes identify them.
pub const MEDIA_TYPES: [&str; 5] = [
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
];

/// The largest file a message carries: 20 MiB (Anthropic's and OpenAI's per-request limits
/// are about this size, once in base64). `--attach` refuses a larger file; an MCP result's
/// larger image stays a text summary.
pub const MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;

/// A file carried by a message: its digest, media type and size, never its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// The media type (one of [`MEDIA_TYPES`]).
    pub media_type: String,
    /// blake3 of the bytes: the blob that holds them.
    pub digest: Digest,
    /// The size of the bytes.
    pub size: u64,
    /// A name for people (the file name given, or the MCP resource's URI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// What kind of file an attachment is, for the providers that take some kinds and not others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    /// A PNG, JPEG, GIF or WebP image.
    Image,
    /// A PDF document.
    Pdf,
}

impl Attachment {
    /// The attachment for `bytes` of `media_type`, named `name`.
    pub fn of(media_type: &str, bytes: &[u8], name: Option<String>) -> Attachment {
        Attachment {
            media_type: media_type.to_owned(),
            digest: Digest::of(bytes),
            size: bytes.len() as u64,
            name,
        }
    }

    /// Image or PDF, from the media type.
    pub fn kind(&self) -> AttachmentKind {
        if self.media_type == "application/pdf" {
            AttachmentKind::Pdf
        } else {
            AttachmentKind::Image
        }
    }

    /// The name to show and to send (a PDF needs a file name on the OpenAI wire formats):
    /// the given name's last path segment, else `attachment.<ext>`.
    pub fn file_name(&self) -> String {
        if let Some(name) = self.name.as_deref() {
            let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
            if !last.is_empty() {
                return last.to_owned();
            }
        }
        let ext = self.media_type.rsplit('/').next().unwrap_or("bin");
        format!("attachment.{ext}")
    }

    /// The text sent instead of the file to a model that does not take its kind.
    pub fn placeholder(&self) -> String {
        let what = match self.kind() {
            AttachmentKind::Image => "image",
            AttachmentKind::Pdf => "PDF",
        };
        format!(
            "[{what} {} ({}, {} bytes) not shown: this model does not accept {what}s]",
            self.file_name(),
            self.media_type,
            self.size
        )
    }
}

/// The media type of `bytes`, from their first bytes (the file's magic number), when it is one
/// runtape accepts; `None` otherwise. The name or extension a file came with is not trusted.
pub fn sniff_media_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_come_from_the_bytes() {
        assert_eq!(
            sniff_media_type(b"\x89PNG\r\n\x1a\nrest"),
            Some("image/png")
        );
        assert_eq!(sniff_media_type(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(sniff_media_type(b"GIF89a.."), Some("image/gif"));
        assert_eq!(
            sniff_media_type(b"RIFF\0\0\0\0WEBPVP8 "),
            Some("image/webp")
        );
        assert_eq!(sniff_media_type(b"%PDF-1.4"), Some("application/pdf"));
        assert_eq!(sniff_media_type(b"hello, png"), None);
        assert_eq!(sniff_media_type(b""), None);
    }

    #[test]
    fn a_placeholder_names_the_file_and_why() {
        let a = Attachment::of("image/png", b"x", Some("dir/cat.png".into()));
        assert_eq!(
            a.placeholder(),
            "[image cat.png (image/png, 1 bytes) not shown: this model does not accept images]"
        );
        let p = Attachment::of("application/pdf", b"xy", None);
        assert_eq!(p.file_name(), "attachment.pdf");
        assert_eq!(p.kind(), AttachmentKind::Pdf);
    }
}
