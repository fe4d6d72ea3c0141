//! Signed, hash-chained receipts for model turns and tool calls. Placeholder until it lands.
