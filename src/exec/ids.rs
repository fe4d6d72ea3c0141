//! Run ids: time-ordered, 16 lowercase characters (10 of milliseconds, 6 random).

use crate::machine::RunId;

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A new run id: sorts by creation time, unique with overwhelming probability.
pub fn new_run_id() -> RunId {
    let mut ms = crate::clock::wall_ms();
    let mut out = [0u8; 16];
    for i in (0..10).rev() {
        out[i] = ALPHABET[(ms & 31) as usize];
        ms >>= 5;
    }
    let mut random = [0u8; 6];
    // If the OS has no randomness to give, the id still carries the millisecond and a
    // per-process counter below keeps ids distinct within the process.
    let _ = getrandom::fill(&mut random);
    static COUNTER: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    random[0] ^= COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    for (i, b) in random.iter().enumerate() {
        out[10 + i] = ALPHABET[(b & 31) as usize];
    }
    RunId::new(out.iter().map(|&b| char::from(b)).collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_well_formed() {
        let a = new_run_id();
        let b = new_run_id();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 16);
        assert!(a.as_str().bytes().all(|c| ALPHABET.contains(&c)));
    }
}
