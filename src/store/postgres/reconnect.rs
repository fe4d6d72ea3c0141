//! Waiting for the database: which failed connection attempts mean the server cannot be
//! reached now — it is down, starting up, shutting down, or the network to it is cut — rather
//! than that it refused this client (a wrong password, an unknown database or role, a
//! certificate), and how long to wait between attempts.
//!
//! A store waits only when told to ([`PostgresStore::wait_for_database`]): `runtape worker`
//! does, so the runs it drives ride out a restart or a short partition instead of failing;
//! other commands fail at once with one line, as they always did.
//!
//! [`PostgresStore::wait_for_database`]: super::PostgresStore::wait_for_database

use std::io::ErrorKind;
use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::store::StoreError;

/// The first wait after a failed attempt.
pub(super) const FIRST_WAIT: Duration = Duration::from_millis(100);

/// The longest wait between two attempts.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(5);

/// Waits that double from [`FIRST_WAIT`] up to a cap.
#[derive(Clone, Debug)]
pub(super) struct Backoff {
    next: Duration,
    cap: Duration,
}

impl Backoff {
    /// Waits from `first`, doubling, never past `cap`.
    pub(super) fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff {
            next: first.min(cap),
            cap,
        }
    }

    /// The wait [`next_wait`](Self::next_wait) will return, without taking it.
    pub(super) fn peek(&self) -> Duration {
        self.next
    }

    /// The wait before the next attempt; each call doubles the one after.
    pub(super) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.cap);
        wait
    }
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new(FIRST_WAIT, MAX_WAIT)
    }
}

/// A connection attempt that failed: the line that says why, and whether the server could
/// not be reached (worth trying again) rather than refused us.
#[derive(Clone, Debug)]
pub(super) struct ConnectFailure {
    pub(super) error: StoreError,
    pub(super) unreachable: bool,
}

/// True when `e`, the driver's error for a connection attempt or a query, means the server
/// could not be reached: nothing answered (refused, reset, closed, timed out, no route), or
/// the server said it cannot take connections now (starting up, shutting down, too many
/// connections). False for everything the server or the URL decided: authentication, an
/// unknown database or role, TLS, a malformed reply.
pub(super) fn unreachable(e: &tokio_postgres::Error) -> bool {
    if let Some(code) = e.code() {
        return *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::TOO_MANY_CONNECTIONS;
    }
    if e.is_closed() {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return unreachable_io(io.kind());
        }
        source = s.source();
    }
    // The driver's own connect timeout has no source.
    e.to_string() == "timeout waiting for server"
}

/// The I/O errors that mean nothing answered at the other end, or the connection to it ended.
fn unreachable_io(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::BrokenPipe
            | ErrorKind::UnexpectedEof
            | ErrorKind::TimedOut
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::AddrNotAvailable
    )
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn waits_double_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(700));
        let waits: Vec<u128> = (0..6).map(|_| b.next_wait().as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 700, 700, 700]);
    }

    /// The driver's error for one connection attempt to `port` (no TLS).
    fn attempt(port: u16) -> tokio_postgres::Error {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let url = format!("postgres://u@127.0.0.1:{port}/db?sslmode=disable");
        rt.block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
            .err()
            .expect("the attempt fails")
    }

    /// A listener that answers one connection's startup message with `reply` (or with
    /// nothing, closing it) and returns its port.
    fn one_answer(reply: Option<Vec<u8>>) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        let port = listener.local_addr().expect("address").port();
        std::thread::spawn(move || {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let mut len = [0u8; 4];
            if s.read_exact(&mut len).is_ok() {
                let mut rest = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
                let _ = s.read_exact(&mut rest);
            }
            if let Some(reply) = reply {
                let _ = s.write_all(&reply);
            }
        });
        port
    }

    /// A FATAL ErrorResponse with `code`, as the server sends it.
    fn fatal(code: &str) -> Vec<u8> {
        let mut fields = Vec::new();
        for (tag, value) in [(b'S', "FATAL"), (b'V', "FATAL"), (b'C', code), (b'M', "no")] {
            fields.push(tag);
            fields.extend_from_slice(value.as_bytes());
            fields.push(0);
        }
        fields.push(0);
        let mut msg = vec![b'E'];
        msg.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
        msg.extend_from_slice(&fields);
        msg
    }

    #[test]
    fn a_server_that_is_down_or_cut_off_is_unreachable() {
        let closed = TcpListener::bind("127.0.0.1:0").expect("binds");
        let port = closed.local_addr().expect("address").port();
        drop(closed);
        assert!(unreachable(&attempt(port)), "nothing listens: refused");
        assert!(
            unreachable(&attempt(one_answer(None))),
            "the connection ends before the server answers"
        );
        for code in ["57P03", "57P01", "53300"] {
            let e = attempt(one_answer(Some(fatal(code))));
            assert!(unreachable(&e), "{code}: {e}");
        }
    }

    #[test]
    fn a_server_that_refuses_this_client_is_not_waited_for() {
        // A wrong password, an unknown database, an unknown role.
        for code in ["28P01", "3D000", "28000"] {
            let e = attempt(one_answer(Some(fatal(code))));
            assert!(!unreachable(&e), "{code}: {e}");
        }
        // Something that is not PostgreSQL.
        let e = attempt(one_answer(Some(
            b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec(),
        )));
        assert!(!unreachable(&e), "{e}");
    }
}
