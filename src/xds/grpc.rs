//! gRPC framing of the ADS streams at the HTTP/2 body level: requests are decoded with
//! tonic's own `Streaming`, responses are encoded once each into a buffer of their exact size
//! that is freed as soon as HTTP/2 has written it.
//!
//! Why not tonic's response encoder: it encodes every message of a stream into one
//! `BytesMut` that it keeps, and reuses, for as long as the stream lives, at the size of the
//! largest message it ever encoded. A proxy's largest message is a whole RouteConfiguration
//! (80 KB on shape L), so ten thousand idle streams each kept 128 KiB of buffer. Here a
//! stream holds nothing between messages.

use super::delta::DeltaOut;
use bytes::Bytes;
use dataflows::model::Body;
use envoy_types::pb::envoy::service::discovery::v3::Resource;
use http_body::Frame;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::sync::mpsc;
use tonic::codegen::http::{self, HeaderMap, HeaderValue};
use tonic::Status;

/// The HTTP/2 paths of the two ADS methods.
pub const SOTW_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
pub const DELTA_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// The gRPC message prefix: one flag byte (0: not compressed) and the length, big endian.
pub const PREFIX: usize = 5;

/// One message as a gRPC length-prefixed frame, in an allocation of its exact size.
pub fn frame<M: prost::Message>(message: &M) -> Result<Bytes, Status> {
    let len = message.encoded_len();
    let len32 = u32::try_from(len)
        .map_err(|_| Status::internal(format!("response of {len} bytes is too large for gRPC")))?;
    let mut buf = Vec::with_capacity(PREFIX + len);
    buf.push(0);
    buf.extend_from_slice(&len32.to_be_bytes());
    // A Vec grows as needed, so encoding into it cannot run out of room.
    message.encode_raw(&mut buf);
    Ok(Bytes::from(buf))
}

/// One response as the chunks of its gRPC frame, written to HTTP/2 in order.
pub type Chunks = Vec<Bytes>;

/// Bodies at most this long are copied into the frame's own chunk; longer ones go out as
/// chunks of their own, shared with the hub (HTTP/2 writes payloads over 256 bytes from
/// the caller's buffer, without copying them into its own).
const SHARE_ABOVE: usize = 4096;

/// A Delta response as the chunks of its gRPC frame: prost's encoding of it, byte for
/// byte, where every body longer than [`SHARE_ABOVE`] is a chunk that shares the hub's
/// bytes instead of a copy. Fields are written in tag order, as prost writes them.
pub fn delta_frame(out: DeltaOut) -> Result<Chunks, Status> {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
    use prost::Message;
    let DeltaOut {
        mut message,
        bodies,
    } = out;
    let resources = std::mem::take(&mut message.resources);
    let version_info = std::mem::take(&mut message.system_version_info);
    // Per resource: the `Any`'s length, the body (if kept apart), and the resource's other
    // fields (3 onwards) as prost encodes them.
    struct Part {
        version: String,
        type_url: String,
        body: Option<Body>,
        any_len: usize,
        rest: Resource,
        len: usize,
    }
    let string_len = |tag: u32, s: &str| {
        if s.is_empty() {
            0
        } else {
            key_len(tag) + encoded_len_varint(s.len() as u64) + s.len()
        }
    };
    let mut parts = Vec::with_capacity(resources.len());
    let mut bodies = bodies.into_iter();
    for mut r in resources {
        let body = bodies.next().flatten();
        let any = r.resource.take();
        let version = std::mem::take(&mut r.version);
        let (type_url, any_len, body) = match (any, body) {
            (Some(any), Some(body)) => {
                let n = body.0.len();
                let value_len = if n == 0 {
                    0
                } else {
                    key_len(2) + encoded_len_varint(n as u64) + n
                };
                let any_len = string_len(1, &any.type_url) + value_len;
                (Some(any.type_url), any_len, Some(body))
            }
            // An `Any` with its own value, or none: prost writes it.
            (any, _) => {
                r.resource = any;
                (None, 0, None)
            }
        };
        let mut len = string_len(1, &version) + r.encoded_len();
        if type_url.is_some() {
            len += key_len(2) + encoded_len_varint(any_len as u64) + any_len;
        }
        parts.push(Part {
            version,
            type_url: type_url.unwrap_or_default(),
            body,
            any_len,
            rest: r,
            len,
        });
    }
    let resources_len: usize = parts
        .iter()
        .map(|p| key_len(2) + encoded_len_varint(p.len as u64) + p.len)
        .sum();
    let len = string_len(1, &version_info) + resources_len + message.encoded_len();
    let len32 = u32::try_from(len)
        .map_err(|_| Status::internal(format!("response of {len} bytes is too large for gRPC")))?;
    let mut chunks = Chunks::new();
    let mut buf: Vec<u8> = Vec::with_capacity((PREFIX + len).min(SHARE_ABOVE * 2));
    buf.push(0);
    buf.extend_from_slice(&len32.to_be_bytes());
    if !version_info.is_empty() {
        prost::encoding::string::encode(1, &version_info, &mut buf);
    }
    for p in parts {
        encode_key(2, WireType::LengthDelimited, &mut buf);
        encode_varint(p.len as u64, &mut buf);
        if !p.version.is_empty() {
            prost::encoding::string::encode(1, &p.version, &mut buf);
        }
        if let Some(body) = p.body {
            encode_key(2, WireType::LengthDelimited, &mut buf);
            encode_varint(p.any_len as u64, &mut buf);
            if !p.type_url.is_empty() {
                prost::encoding::string::encode(1, &p.type_url, &mut buf);
            }
            let n = body.0.len();
            if n > 0 {
                encode_key(2, WireType::LengthDelimited, &mut buf);
                encode_varint(n as u64, &mut buf);
                if n <= SHARE_ABOVE {
                    buf.extend_from_slice(&body.0);
                } else {
                    chunks.push(Bytes::from(std::mem::take(&mut buf)));
                    chunks.push(Bytes::from_owner(body.0));
                }
            }
        }
        p.rest.encode_raw(&mut buf);
    }
    message.encode_raw(&mut buf);
    if !buf.is_empty() {
        chunks.push(Bytes::from(buf));
    }
    Ok(chunks)
}

/// The response body of one ADS stream: frames as the stream task sends them, then the
/// trailers (`grpc-status`) when the task ends (OK) or sends an error status.
pub struct ResponseBody {
    rx: mpsc::Receiver<Result<Chunks, Status>>,
    /// The rest of the frame being written.
    queue: std::collections::VecDeque<Bytes>,
    done: bool,
}

impl ResponseBody {
    pub fn new(rx: mpsc::Receiver<Result<Chunks, Status>>) -> Self {
        ResponseBody {
            rx,
            queue: Default::default(),
            done: false,
        }
    }
}

fn trailers(status: &Status) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if status.add_header(&mut headers).is_err() {
        // A message that cannot be a header value: the code alone still tells the client.
        headers.insert(Status::GRPC_STATUS, HeaderValue::from(status.code() as i32));
    }
    headers
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(chunk) = self.queue.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let frame = match ready!(self.rx.poll_recv(cx)) {
            Some(Ok(chunks)) => {
                self.queue.extend(chunks);
                match self.queue.pop_front() {
                    Some(chunk) => Frame::data(chunk),
                    // A frame of no chunks: nothing to write, take the next.
                    None => return self.poll_frame(cx),
                }
            }
            Some(Err(status)) => {
                self.done = true;
                Frame::trailers(trailers(&status))
            }
            None => {
                self.done = true;
                Frame::trailers(trailers(&Status::ok("")))
            }
        };
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.queue.is_empty()
    }
}

/// The response that starts a stream: headers now, the body as the task sends it.
pub fn streaming_response(
    rx: mpsc::Receiver<Result<Chunks, Status>>,
) -> http::Response<tonic::body::Body> {
    let mut response = http::Response::new(tonic::body::Body::new(ResponseBody::new(rx)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    response
}

/// The request can be read by this server: messages are not compressed (no compression is
/// offered, and Envoy compresses none unless told to).
pub fn check_request<B>(request: &http::Request<B>) -> Result<(), Status> {
    match request.headers().get("grpc-encoding").map(|v| v.as_bytes()) {
        None | Some(b"identity") => Ok(()),
        Some(other) => Err(Status::unimplemented(format!(
            "request messages compressed with {:?}: this server reads uncompressed messages only",
            String::from_utf8_lossy(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse;
    use envoy_types::pb::google::protobuf::Any;

    fn resource(name: &str, version: &str, aliases: &[&str]) -> Resource {
        Resource {
            name: name.into(),
            version: version.into(),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
            resource: Some(Any {
                type_url: "type.googleapis.com/envoy.config.route.v3.RouteConfiguration".into(),
                value: Vec::new(),
            }),
            ..Default::default()
        }
    }

    fn body(n: usize, seed: u8) -> Option<Body> {
        Some(Body((0..n).map(|i| (i as u8).wrapping_mul(seed)).collect()))
    }

    /// The chunks of a Delta frame are prost's encoding of the whole message, byte for
    /// byte, whatever the sizes of the bodies (copied, shared, empty) and the other fields.
    #[test]
    fn delta_frame_is_prosts_encoding_with_bodies_shared() {
        let cases: Vec<DeltaOut> = vec![
            DeltaOut::default(),
            DeltaOut {
                message: DeltaDiscoveryResponse {
                    type_url: "t".into(),
                    removed_resources: vec!["gone".into(), "also".into()],
                    nonce: "n-1".into(),
                    ..Default::default()
                },
                bodies: Vec::new(),
            },
            DeltaOut {
                message: DeltaDiscoveryResponse {
                    system_version_info: "v9".into(),
                    type_url: "t".into(),
                    resources: vec![
                        resource("small", "1", &[]),
                        resource("large", "2", &["alias/a", "alias/b"]),
                        resource("empty", "", &[]),
                        resource("edge", "3", &[]),
                        resource("over", "4", &[]),
                        resource("huge", "5", &[]),
                    ],
                    removed_resources: vec!["x".into()],
                    nonce: "n-2".into(),
                    ..Default::default()
                },
                bodies: vec![
                    body(100, 3),
                    body(60_000, 7),
                    body(0, 1),
                    body(SHARE_ABOVE, 5),
                    body(SHARE_ABOVE + 1, 11),
                    body(300_000, 13),
                ],
            },
            // A resource whose `Any` carries its own value, and one with no `Any`.
            DeltaOut {
                message: DeltaDiscoveryResponse {
                    resources: vec![
                        Resource {
                            name: "own".into(),
                            resource: Some(Any {
                                type_url: "u".into(),
                                value: vec![1, 2, 3],
                            }),
                            ..Default::default()
                        },
                        Resource {
                            name: "none".into(),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
                bodies: vec![None, body(10, 1)],
            },
        ];
        for (i, out) in cases.into_iter().enumerate() {
            let expected = frame(&out.clone().into_message()).expect("frame");
            let chunks = delta_frame(out).expect("delta frame");
            let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            assert_eq!(joined, expected.to_vec(), "case {i}");
        }
    }

    /// Large bodies are not copied: their chunk points at the hub's bytes.
    #[test]
    fn delta_frame_shares_large_bodies() {
        let large = Body(vec![7u8; 50_000].into());
        let out = DeltaOut {
            message: DeltaDiscoveryResponse {
                resources: vec![resource("r", "1", &[])],
                ..Default::default()
            },
            bodies: vec![Some(large.clone())],
        };
        let chunks = delta_frame(out).expect("delta frame");
        assert!(
            chunks
                .iter()
                .any(|c| c.as_ptr() == large.0.as_ptr() && c.len() == large.0.len()),
            "the body's chunk is the hub's allocation"
        );
    }
}
