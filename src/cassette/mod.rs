//! Cassettes: recorded model exchanges for offline replay. Placeholder until it lands.
