//! HTTP/1.1 message framing shared by the client (`http_client`) and the backends (`backend`):
//! the head (start line and headers) and where a body ends (length, chunked, or at close).

/// How an HTTP/1.1 message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Framing {
    Empty,
    Length(usize),
    Chunked,
    UntilClose,
}

/// The message head: start line, lower-cased headers, and its length including the blank line.
pub(super) struct Head {
    pub(super) start_line: String,
    pub(super) headers: Vec<(String, String)>,
    pub(super) len: usize,
}

impl Head {
    pub(super) fn parse(buf: &[u8]) -> Result<Option<Head>, String> {
        let Some(end) = find(buf, b"\r\n\r\n") else {
            return Ok(None);
        };
        let text = std::str::from_utf8(&buf[..end]).map_err(|_| "non-UTF-8 message head")?;
        let mut lines = text.split("\r\n");
        let start_line = lines.next().unwrap_or_default().to_owned();
        let headers = lines
            .map(|line| {
                let (name, value) = line
                    .split_once(':')
                    .ok_or_else(|| format!("malformed header line {line:?}"))?;
                Ok((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            })
            .collect::<Result<_, String>>()?;
        Ok(Some(Head {
            start_line,
            headers,
            len: end + 4,
        }))
    }

    fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    pub(super) fn has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// Body framing by RFC 9112 §6.3; `otherwise` when neither chunked nor a length is given.
    pub(super) fn framing(&self, otherwise: Framing) -> Result<Framing, String> {
        if self.has_token("transfer-encoding", "chunked") {
            return Ok(Framing::Chunked);
        }
        match self.header("content-length") {
            Some(len) => len
                .parse()
                .map(Framing::Length)
                .map_err(|_| format!("bad content-length {len:?}")),
            None => Ok(otherwise),
        }
    }
}

/// The value of the first header called `name` (already lower-cased, as `Head::parse` stores
/// names).
pub(super) fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The decoded body and the bytes it occupied, or `None` if incomplete.
pub(super) fn read_body(
    data: &[u8],
    framing: Framing,
    eof: bool,
) -> Result<Option<(Vec<u8>, usize)>, String> {
    match framing {
        Framing::Empty => Ok(Some((Vec::new(), 0))),
        Framing::Length(len) if data.len() >= len => Ok(Some((data[..len].to_vec(), len))),
        Framing::Length(_) => Ok(None),
        Framing::Chunked => decode_chunked(data),
        Framing::UntilClose if eof => Ok(Some((data.to_vec(), data.len()))),
        Framing::UntilClose => Ok(None),
    }
}

/// Decodes a chunked body; `None` until the last chunk and the trailers have arrived.
fn decode_chunked(data: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let Some(line_len) = find(&data[pos..], b"\r\n") else {
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&data[pos..pos + line_len]);
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size line {line:?}"))?;
        pos += line_len + 2;
        if size == 0 {
            // Trailer fields, then an empty line.
            loop {
                let Some(len) = find(&data[pos..], b"\r\n") else {
                    return Ok(None);
                };
                pos += len + 2;
                if len == 0 {
                    return Ok(Some((body, pos)));
                }
            }
        }
        if data.len() < pos + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&data[pos..pos + size]);
        pos += size + 2;
    }
}
