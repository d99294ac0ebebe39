//! A TCP relay between a proxy and meshflow that a test can pause: the proxy's xDS stream
//! stays open, but no byte passes either way until it resumes — a proxy slow to take its
//! configuration, while its data plane keeps serving. Loopback only.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct PausableLink {
    addr: SocketAddr,
    paused: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl PausableLink {
    /// Relays every connection made to [`Self::addr`] to `target`.
    pub fn start(target: SocketAddr) -> PausableLink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the link");
        let addr = listener.local_addr().expect("the link's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let paused = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (paused.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((down, _)) => {
                        let Ok(up) = TcpStream::connect(target) else {
                            continue;
                        };
                        for (from, to) in [(&down, &up), (&up, &down)] {
                            let (from, to) = (
                                from.try_clone().expect("clone a socket"),
                                to.try_clone().expect("clone a socket"),
                            );
                            let (p, s) = (p.clone(), s.clone());
                            std::thread::spawn(move || pump(from, to, &p, &s));
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => return,
                }
            }
        });
        PausableLink { addr, paused, stop }
    }

    /// Where the proxy connects instead of meshflow.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Nothing passes until [`Self::resume`]: bytes wait in the sockets' buffers.
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }
}

impl Drop for PausableLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` while not paused, until either side closes or the link stops.
fn pump(mut from: TcpStream, mut to: TcpStream, paused: &AtomicBool, stop: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::SeqCst) {
        if paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
