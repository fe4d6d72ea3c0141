//! One reusable buffer per thread for JSON that is hashed, or copied once into a value of its
//! own: recording a transition writes its event, state and head as JSON, and growing a fresh
//! `Vec` for each (128 bytes, doubled until it fits) cost reallocations and copies on every
//! step.
//!
//! When to use: [`with_json`] where the bytes are only read (hashed, compared, copied in
//! part), [`json_exact`] where they are kept. The bytes are exactly `serde_json::to_vec`'s
//! (written by [`crate::compact_json`]).

use std::cell::RefCell;

use serde::Serialize;

/// A buffer grown past this is dropped after use rather than kept by its thread.
const KEEP_AT_MOST: usize = 64 * 1024;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(4096));
}

/// Writes `value` as compact JSON and gives the bytes to `read`, in this thread's buffer when
/// it is free (a nested call, from inside `read`, uses a buffer of its own).
pub(crate) fn with_json<T: Serialize + ?Sized, R>(
    value: &T,
    read: impl FnOnce(&[u8]) -> R,
) -> serde_json::Result<R> {
    with_buffer(|buf| crate::compact_json::write(buf, value).map(|()| read(buf)))
}

/// Gives `fill` this thread's buffer, empty (a nested call gets a fresh one): for bytes
/// written in several pieces and then read or copied out whole.
pub(crate) fn with_buffer<R>(fill: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let result = fill(&mut buf);
            if buf.capacity() > KEEP_AT_MOST {
                *buf = Vec::with_capacity(4096);
            }
            result
        }
        Err(_) => fill(&mut Vec::new()),
    })
}

/// `serde_json::to_vec(value)` in one allocation of exactly its length.
pub(crate) fn json_exact<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    with_json(value, <[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_bytes_are_serde_jsons_and_nested_calls_get_their_own_buffer() {
        let outer = json!({"b": [1, 2, {"c": "d\"e"}], "a": null});
        let inner = json!(["x", "y", "z"]);
        let (o, i) = with_json(&outer, |o| {
            let i = json_exact(&inner).expect("encodes");
            (o.to_vec(), i)
        })
        .expect("encodes");
        assert_eq!(o, serde_json::to_vec(&outer).expect("encodes"));
        assert_eq!(i, serde_json::to_vec(&inner).expect("encodes"));
        let exact = json_exact(&outer).expect("encodes");
        assert_eq!(exact.capacity(), exact.len());
    }

    #[test]
    fn a_large_value_is_written_whole_and_its_buffer_not_kept() {
        let big = json!("x".repeat(KEEP_AT_MOST * 2));
        assert_eq!(
            json_exact(&big).expect("encodes"),
            serde_json::to_vec(&big).expect("encodes")
        );
        SCRATCH.with(|cell| assert!(cell.borrow().capacity() <= KEEP_AT_MOST));
    }
}
