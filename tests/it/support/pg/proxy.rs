//! A TCP proxy on 127.0.0.1 that a test puts between one process and the PostgreSQL server,
//! to cut the network between them while both keep running.
//!
//! [`Proxy::start`] listens on a free loopback port and forwards every connection to the
//! server's port, byte for byte, in both directions. [`Proxy::cut`] is the partition: every
//! connection in flight is shut down at once (both sides see it end, as after a reset), and
//! every connection made until [`Proxy::heal`] is closed as soon as it is accepted, before a
//! byte is forwarded (the client's connection attempt fails). [`Proxy::heal`] forwards new
//! connections again; the ones cut stay cut, as after a real partition.
//!
//! Plain threads and blocking sockets: the tests that use it are synchronous, and a proxy
//! carries a handful of connections.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A running proxy; stopped (and every connection through it closed) when dropped.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    /// True while cut: new connections are closed at once.
    cut: AtomicBool,
    /// True once the proxy is dropped.
    stopped: AtomicBool,
    /// Each forwarded connection's two sockets, by id, until it ends.
    open: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    next_id: AtomicU64,
    /// Connections accepted and closed at once while cut.
    refused: AtomicU64,
}

fn fail(what: &str) -> ! {
    panic!("test proxy: {what}");
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| fail(&format!("no free loopback port ({e})")));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| fail(&format!("no local address ({e})")))
            .port();
        let shared = Arc::new(Shared {
            cut: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let accepting = shared.clone();
        std::thread::spawn(move || accept_loop(&listener, upstream, &accepting));
        Proxy { port, shared }
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` (a `postgres://…@127.0.0.1:PORT/…` URL of the server) with the proxy's port.
    pub fn url(&self, url: &str) -> String {
        let Some((head, tail)) = url.split_once("@127.0.0.1:") else {
            fail(&format!("{url} does not name 127.0.0.1:PORT"));
        };
        let rest = tail.find('/').map_or("", |i| &tail[i..]);
        format!("{head}@127.0.0.1:{}{rest}", self.port)
    }

    /// The partition: shuts every connection in flight down and refuses new ones until
    /// [`heal`](Self::heal). Returns how many connections were cut.
    pub fn cut(&self) -> usize {
        let open = {
            let mut open = self.shared.lock_open();
            self.shared.cut.store(true, Ordering::SeqCst);
            std::mem::take(&mut *open)
        };
        for (_, client, server) in &open {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
        open.len()
    }

    /// Ends the partition: new connections are forwarded again.
    pub fn heal(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    /// Connections being forwarded now.
    pub fn open_connections(&self) -> usize {
        self.shared.lock_open().len()
    }

    /// Connections refused while cut, so far.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.cut();
        // Wakes the accept loop so it sees it is stopped.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

impl Shared {
    fn lock_open(&self) -> std::sync::MutexGuard<'_, Vec<(u64, TcpStream, TcpStream)>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn forget(&self, id: u64) {
        self.lock_open().retain(|(i, _, _)| *i != id);
    }
}

fn accept_loop(listener: &TcpListener, upstream: u16, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        if shared.cut.load(Ordering::SeqCst) {
            refuse(&client, shared);
            continue;
        }
        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
            // The server is down: the client sees its connection end, as it would.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
            client.try_clone(),
            server.try_clone(),
            client.try_clone(),
            server.try_clone(),
        ) else {
            continue;
        };
        {
            // Under the lock `cut` takes: a connection is either cut with the others or
            // refused, never left open across a cut.
            let mut open = shared.lock_open();
            if shared.cut.load(Ordering::SeqCst) {
                drop(open);
                let _ = server.shutdown(Shutdown::Both);
                refuse(&client, shared);
                continue;
            }
            open.push((id, c3, s3));
        }
        let (a, b) = (shared.clone(), shared.clone());
        std::thread::spawn(move || pump(client, server, id, &a));
        std::thread::spawn(move || pump(s2, c2, id, &b));
    }
}

fn refuse(client: &TcpStream, shared: &Shared) {
    shared.refused.fetch_add(1, Ordering::SeqCst);
    let _ = client.shutdown(Shutdown::Both);
}

/// Copies `from` to `to` until either ends; then ends both.
fn pump(mut from: TcpStream, mut to: TcpStream, id: u64, shared: &Shared) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    shared.forget(id);
}
