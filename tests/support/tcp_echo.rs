//! TCP backends for the TCP-traffic tests: a tiny loopback server that greets every
//! connection with its identity (one line) and then echoes what it receives, and a client
//! that opens connections through Envoy and tallies which backend answered each.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::IO_TIMEOUT;

/// A TCP server on one loopback address: `identity\n`, then an echo; it stops on drop.
pub struct TcpEcho {
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl TcpEcho {
    /// Listens on `ip:port`; panics if the address cannot be bound.
    pub fn start(ip: &str, port: u16, identity: &str) -> TcpEcho {
        let addr: SocketAddr = format!("{ip}:{port}")
            .parse()
            .unwrap_or_else(|e| panic!("echo address {ip}:{port}: {e}"));
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("echo bind {addr}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("nonblocking echo listener");
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let stop = stop.clone();
            let identity = identity.to_owned();
            thread::Builder::new()
                .name(format!("echo-{identity}"))
                .spawn(move || accept_loop(&listener, &identity, &stop))
                .expect("spawn echo thread")
        };
        TcpEcho {
            stop,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for TcpEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, identity: &str, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let identity = identity.to_owned();
                // A connection of its own: a slow client never holds up the others.
                let _ = thread::Builder::new()
                    .name("echo-conn".into())
                    .spawn(move || serve(stream, &identity));
            }
            Err(_) => thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn serve(mut stream: TcpStream, identity: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    if writeln!(stream, "{identity}").is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        match std::io::Read::read(&mut stream, &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// One connection to `addr`: the identity of the backend that answered, once it has also
/// echoed a line back (so the whole path carries data both ways), else `error: …`.
pub fn tcp_exchange(addr: SocketAddr) -> String {
    let attempt = || -> Result<String, String> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
        writer.write_all(b"ping\n").map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(stream);
        let (mut identity, mut echo) = (String::new(), String::new());
        reader.read_line(&mut identity).map_err(|e| e.to_string())?;
        reader.read_line(&mut echo).map_err(|e| e.to_string())?;
        if identity.is_empty() {
            return Err("closed without a greeting".into());
        }
        if echo.trim_end() != "ping" {
            return Err(format!("echo {echo:?} from {}", identity.trim_end()));
        }
        Ok(identity.trim_end().to_owned())
    };
    attempt().unwrap_or_else(|e| format!("error: {e}"))
}

/// Which backend answered each of `n` connections to `addr`.
pub fn tcp_tally(addr: SocketAddr, n: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..n {
        *counts.entry(tcp_exchange(addr)).or_default() += 1;
    }
    counts
}
