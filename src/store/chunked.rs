//! An append-only list kept in chunks of a fixed size, for the in-memory store's histories.
//!
//! A `Vec` that grows by doubling copies everything it holds each time it grows, into memory
//! the process has never touched (every new page a fault the kernel clears first): a long run's
//! history was copied about once over as it grew. Chunks are allocated once at their full
//! size and never move, so growing costs one allocation per [`CHUNK`] items and no copies.

/// Items per chunk: 256 transition records are about 40 KiB, so a chunk is one large
/// allocation rather than many small ones, and a short run wastes at most one chunk's tail.
const CHUNK: usize = 256;

/// Items in the order they were pushed. Use where items are only appended and read in order
/// (or from the back).
#[derive(Clone, Debug)]
pub(super) struct Chunked<T> {
    chunks: Vec<Vec<T>>,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: Vec::new() }
    }
}

impl<T> Chunked<T> {
    /// Appends `item` after every item pushed before.
    pub(super) fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
    }

    /// Every item, oldest first (reversible, for reading from the newest).
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// The items from the first one for which `before` is false, oldest first, skipping
    /// whole chunks whose last item is still `before`. `before` must hold for a prefix of the
    /// items and not after it (a key that only grows, compared with a bound).
    pub(super) fn iter_from(&self, before: impl Fn(&T) -> bool) -> impl Iterator<Item = &T> {
        self.chunks
            .iter()
            .skip_while(move |chunk| chunk.last().is_some_and(&before))
            .flatten()
    }

    /// How many items there are.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_back_in_order_across_chunk_boundaries_and_chunks_never_grow() {
        for n in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7] {
            let mut list = Chunked::default();
            for i in 0..n {
                list.push(i);
            }
            assert_eq!(list.len(), n);
            assert_eq!(
                list.iter().copied().collect::<Vec<_>>(),
                (0..n).collect::<Vec<_>>()
            );
            assert_eq!(
                list.iter().rev().copied().collect::<Vec<_>>(),
                (0..n).rev().collect::<Vec<_>>()
            );
            // Allocated once at full size: no chunk ever reallocated.
            assert!(list.chunks.iter().all(|c| c.capacity() == CHUNK));
            for from in [
                0,
                1,
                CHUNK - 1,
                CHUNK,
                CHUNK + 1,
                n.saturating_sub(1),
                n,
                n + 5,
            ] {
                assert_eq!(
                    list.iter_from(|&i| i < from)
                        .skip_while(|&&i| i < from)
                        .copied()
                        .collect::<Vec<_>>(),
                    (from..n).collect::<Vec<_>>(),
                    "from {from} of {n}"
                );
            }
        }
    }
}
