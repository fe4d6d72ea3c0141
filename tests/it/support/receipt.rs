//! Receipt chains built in memory, for the receipt tests.
#![allow(dead_code, unreachable_pub)]

use runtape::receipt::{Receipt, ReceiptDraft, ReceiptSigner};

/// The receipts of `draft(0)`, `draft(1)`, … `draft(n - 1)`, each sealed by `signer` on the
/// one before it.
pub fn sealed(signer: &ReceiptSigner, n: u64, draft: impl Fn(u64) -> ReceiptDraft) -> Vec<Receipt> {
    let mut out: Vec<Receipt> = Vec::new();
    for i in 0..n {
        let receipt = signer
            .seal(out.last(), draft(i))
            .expect("test drafts are valid");
        out.push(receipt);
    }
    out
}
