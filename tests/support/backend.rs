//! Backends: tiny loopback HTTP/1.1 servers that play the workloads behind Envoy. Each answers
//! with its identity, so a test can tell which endpoint a request reached. A request can also
//! ask for a failure (a status, a dropped connection, a delay) the first few times it arrives,
//! which is how the retry and timeout tests make a backend misbehave on cue.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::http_wire::{read_body, Framing, Head};

/// A tiny HTTP/1.1 server on one loopback address: every request gets `200`, body `identity`,
/// header `x-backend: identity`. Keep-alive and pipelining work; it stops on drop.
///
/// Test-only request headers make it misbehave:
/// - `x-delay-ms: N` answers after N milliseconds;
/// - `x-fail-key: K`, `x-fail-times: N`, `x-fail-with: F`: the first N requests carrying key
///   K fail with F — a status code (`500`), `reset` (the connection is closed with no
///   response) or `delay-MS` (answered after MS milliseconds) — and later ones are answered.
///   [`Backend::arrivals`] counts the requests of a key, so a test sees how often it was tried.
pub struct Backend {
    /// Where it listens; `None` for a Unix domain socket.
    addr: Option<SocketAddr>,
    identity: String,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicUsize>,
    arrivals: Arc<Mutex<HashMap<String, usize>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl Backend {
    /// Listens on `ip:port` (e.g. `127.0.10.3:18080`); panics if the address cannot be bound.
    pub fn start(ip: &str, port: u16, identity: &str) -> Backend {
        let addr: SocketAddr = ip
            .parse::<std::net::IpAddr>()
            .map(|ip| SocketAddr::new(ip, port))
            .unwrap_or_else(|e| panic!("backend address {ip}:{port}: {e}"));
        let listener =
            TcpListener::bind(addr).unwrap_or_else(|e| panic!("backend bind {addr}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("nonblocking backend listener");
        Backend::serve(Some(addr), listener, identity)
    }

    /// Listens on the Unix domain socket `path` (what a ServiceEntry's `unix://` endpoint
    /// names); panics if it cannot be bound.
    pub fn start_unix(path: &Path, identity: &str) -> Backend {
        let listener = UnixListener::bind(path)
            .unwrap_or_else(|e| panic!("backend bind {}: {e}", path.display()));
        listener
            .set_nonblocking(true)
            .expect("nonblocking backend listener");
        Backend::serve(None, listener, identity)
    }

    fn serve(addr: Option<SocketAddr>, listener: impl Accept, identity: &str) -> Backend {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Shared {
            identity: identity.to_owned(),
            served: Arc::new(AtomicUsize::new(0)),
            arrivals: Arc::default(),
        };
        let (served, arrivals) = (shared.served.clone(), shared.arrivals.clone());
        let acceptor = {
            let stop = stop.clone();
            thread::Builder::new()
                .name(format!("backend-{identity}"))
                .spawn(move || accept_loop(listener, &shared, &stop))
                .expect("spawn backend thread")
        };
        Backend {
            addr,
            identity: identity.to_owned(),
            stop,
            served,
            arrivals,
            acceptor: Some(acceptor),
        }
    }

    /// Its TCP address (a Unix domain socket backend has none).
    pub fn addr(&self) -> SocketAddr {
        self.addr.expect("a TCP backend")
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// How many requests it has answered.
    pub fn requests_served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }

    /// How many requests with `x-fail-key: key` have arrived (failed or answered).
    pub fn arrivals(&self, key: &str) -> usize {
        let arrivals = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        arrivals.get(key).copied().unwrap_or(0)
    }
}

/// What the accept loop hands every connection: who the backend is and what it counts.
#[derive(Clone)]
struct Shared {
    identity: String,
    served: Arc<AtomicUsize>,
    arrivals: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// A listening socket the backend accepts connections from: TCP or a Unix domain socket.
trait Accept: Send + 'static {
    type Conn: Conn;
    fn accept_conn(&self) -> io::Result<Self::Conn>;
}

/// One accepted connection, in blocking mode with a read timeout once prepared.
trait Conn: Read + Write + Send + 'static {
    fn prepare(&self, timeout: Duration) -> io::Result<()>;
}

impl Accept for TcpListener {
    type Conn = TcpStream;
    fn accept_conn(&self) -> io::Result<TcpStream> {
        self.accept().map(|(s, _)| s)
    }
}

impl Conn for TcpStream {
    fn prepare(&self, timeout: Duration) -> io::Result<()> {
        self.set_nonblocking(false)?;
        self.set_read_timeout(Some(timeout))?;
        let _ = self.set_nodelay(true);
        Ok(())
    }
}

impl Accept for UnixListener {
    type Conn = UnixStream;
    fn accept_conn(&self) -> io::Result<UnixStream> {
        self.accept().map(|(s, _)| s)
    }
}

impl Conn for UnixStream {
    fn prepare(&self, timeout: Duration) -> io::Result<()> {
        self.set_nonblocking(false)?;
        self.set_read_timeout(Some(timeout))
    }
}

fn accept_loop(listener: impl Accept, shared: &Shared, stop: &Arc<AtomicBool>) {
    let identity = &shared.identity;
    while !stop.load(Ordering::SeqCst) {
        match listener.accept_conn() {
            Ok(stream) => {
                let (shared, stop) = (shared.clone(), stop.clone());
                thread::spawn(move || serve_connection(stream, &shared, &stop));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(5))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("backend {identity}: accept failed: {e}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Serves requests on one connection until the peer closes, asks to close, sends garbage, or the
/// backend stops (checked every 100 ms).
fn serve_connection(mut stream: impl Conn, shared: &Shared, stop: &AtomicBool) {
    let identity = shared.identity.as_str();
    if stream.prepare(Duration::from_millis(100)).is_err() {
        return;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8 * 1024];
    loop {
        // Answer every complete request already buffered (pipelining).
        loop {
            let request = match parse_request(&buf) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(e) => {
                    let _ = write_response(&mut stream, 400, &e, "", identity, true);
                    return;
                }
            };
            buf.drain(..request.len);
            let status = match request.behaviour.answer(&shared.arrivals) {
                Answer::Drop => return,
                Answer::After(delay, status) => {
                    thread::sleep(delay);
                    status
                }
            };
            shared.served.fetch_add(1, Ordering::SeqCst);
            if write_response(
                &mut stream,
                status,
                identity,
                &request.echo,
                identity,
                request.close,
            )
            .is_err()
                || request.close
            {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            _ if stop.load(Ordering::SeqCst) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

/// A complete request in the buffer: how many bytes it spans, and whether to close afterwards.
struct RequestFrame {
    len: usize,
    close: bool,
    /// Response header lines telling what arrived: `x-echo-path`, `x-echo-host`, and each
    /// `x-` request header as `x-echo-<name>` (how tests see rewrites and header edits).
    echo: String,
    behaviour: Behaviour,
}

/// The misbehaviour a request asks for (see [`Backend`]).
#[derive(Default)]
struct Behaviour {
    delay: Duration,
    /// Key, how many of its first requests fail, and how.
    fail: Option<(String, usize, String)>,
}

/// How the backend answers one request.
enum Answer {
    /// Close the connection without a response.
    Drop,
    /// Wait, then answer with this status.
    After(Duration, u16),
}

impl Behaviour {
    fn read(head: &Head) -> Result<Behaviour, String> {
        let get = |name: &str| {
            head.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let number = |name: &str| -> Result<Option<u64>, String> {
            get(name)
                .map(|v| {
                    v.parse()
                        .map_err(|_| format!("{name}: {v:?} is not a number"))
                })
                .transpose()
        };
        let delay = Duration::from_millis(number("x-delay-ms")?.unwrap_or(0));
        let fail = match get("x-fail-key") {
            None => None,
            Some(key) => {
                let times = number("x-fail-times")?.unwrap_or(1) as usize;
                let with = get("x-fail-with").unwrap_or("500").to_owned();
                Some((key.to_owned(), times, with))
            }
        };
        Ok(Behaviour { delay, fail })
    }

    /// Counts the request under its key and picks its answer.
    fn answer(&self, arrivals: &Mutex<HashMap<String, usize>>) -> Answer {
        let ok = Answer::After(self.delay, 200);
        let Some((key, times, with)) = &self.fail else {
            return ok;
        };
        let nth = {
            let mut arrivals = arrivals.lock().unwrap_or_else(|e| e.into_inner());
            let n = arrivals.entry(key.clone()).or_insert(0);
            *n += 1;
            *n
        };
        if nth > *times {
            return ok;
        }
        if with == "reset" {
            return Answer::Drop;
        }
        if let Some(ms) = with.strip_prefix("delay-").and_then(|ms| ms.parse().ok()) {
            return Answer::After(Duration::from_millis(ms), 200);
        }
        Answer::After(self.delay, with.parse().unwrap_or(500))
    }
}

fn echo_lines(head: &Head) -> String {
    let path = head.start_line.split(' ').nth(1).unwrap_or_default();
    let mut out = format!("x-echo-path: {path}\r\n");
    for (name, value) in &head.headers {
        let name = name.to_ascii_lowercase();
        if name == "host" {
            out.push_str(&format!("x-echo-host: {value}\r\n"));
        } else if name.starts_with("x-") && !name.starts_with("x-envoy") {
            out.push_str(&format!("x-echo-{name}: {value}\r\n"));
        }
    }
    out
}

fn parse_request(buf: &[u8]) -> Result<Option<RequestFrame>, String> {
    let Some(head) = Head::parse(buf)? else {
        return Ok(None);
    };
    let framing = head.framing(Framing::Empty)?;
    let Some((_, body_len)) = read_body(&buf[head.len..], framing, false)? else {
        return Ok(None);
    };
    let http10 = head.start_line.ends_with("HTTP/1.0");
    let close = head.has_token("connection", "close")
        || (http10 && !head.has_token("connection", "keep-alive"));
    Ok(Some(RequestFrame {
        len: head.len + body_len,
        close,
        echo: echo_lines(&head),
        behaviour: Behaviour::read(&head)?,
    }))
}

fn write_response(
    stream: &mut impl Write,
    status: u16,
    body: &str,
    echo: &str,
    identity: &str,
    close: bool,
) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        _ => "Failed On Request",
    };
    let connection = if close { "connection: close\r\n" } else { "" };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         x-backend: {identity}\r\n{echo}{connection}\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())
}
