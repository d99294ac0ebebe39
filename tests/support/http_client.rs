//! A std-only HTTP/1.1 client (`http_get`, `http_request`): one request over a fresh connection,
//! with a hard time budget, so a test talks to Envoy listeners and admin without an async
//! runtime and a hung peer fails the test instead of hanging it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::http_wire::{header_value, read_body, Framing, Head};

/// Connect/read/write budget of one HTTP exchange.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed HTTP/1.1 response.
#[derive(Clone, Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names are lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, &name.to_ascii_lowercase())
    }

    /// Every value of header `name`, in the order received.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path` to `addr` with `Host: host` and extra `headers`, over a fresh connection
/// (`Connection: close`), within 5 s. Returns the status and the body.
pub fn http_get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    http_request(addr, "GET", host, path, headers).map(|r| (r.status, r.text()))
}

/// One HTTP/1.1 exchange over a fresh connection with `Connection: close`. Understands
/// `Content-Length`, chunked and read-until-close bodies.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<HttpResponse, String> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| format!("configure socket to {addr}: {e}"))?;

    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         User-Agent: meshflow-tests\r\nAccept: */*\r\n"
    );
    for (name, value) in headers {
        request += &format!("{name}: {value}\r\n");
    }
    request += "\r\n";
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("send request to {addr}: {e}"))?;

    let no_body = method.eq_ignore_ascii_case("HEAD");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut eof = false;
    loop {
        if let Some(response) = parse_response(&buf, eof, no_body)? {
            return Ok(response);
        }
        if eof {
            return Err(format!(
                "{addr} closed the connection after {} bytes, before a complete response: {:?}",
                buf.len(),
                String::from_utf8_lossy(&buf)
            ));
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(format!(
                "no complete response from {addr} within {IO_TIMEOUT:?}"
            ));
        }
        stream
            .set_read_timeout(Some(remaining))
            .map_err(|e| format!("set read timeout: {e}"))?;
        match stream.read(&mut chunk) {
            Ok(0) => eof = true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read from {addr}: {e}")),
        }
    }
}

/// Parses a complete response from `buf`, `None` if more bytes are needed.
fn parse_response(buf: &[u8], eof: bool, no_body: bool) -> Result<Option<HttpResponse>, String> {
    let Some(head) = Head::parse(buf)? else {
        return Ok(None);
    };
    let status: u16 = head
        .start_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {:?}", head.start_line))?;
    if (100..200).contains(&status) {
        // An interim response (e.g. 100 Continue): the real one follows.
        return parse_response(&buf[head.len..], eof, no_body);
    }
    let framing = if no_body || status == 204 || status == 304 {
        Framing::Empty
    } else {
        head.framing(Framing::UntilClose)?
    };
    let Some((body, _)) = read_body(&buf[head.len..], framing, eof)? else {
        return Ok(None);
    };
    Ok(Some(HttpResponse {
        status,
        headers: head.headers,
        body,
    }))
}
