//! gRPC framing of the ADS streams at the HTTP/2 body level: requests are decoded with
//! tonic's own `Streaming`, responses are encoded once each into a buffer of their exact size
//! that is freed as soon as HTTP/2 has written it.
//!
//! Why not tonic's response encoder: it encodes every message of a stream into one
//! `BytesMut` that it keeps, and reuses, for as long as the stream lives, at the size of the
//! largest message it ever encoded. A proxy's largest message is a whole RouteConfiguration
//! (80 KB on shape L), so ten thousand idle streams each kept 128 KiB of buffer. Here a
//! stream holds nothing between messages.

use bytes::Bytes;
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

/// The response body of one ADS stream: frames as the stream task sends them, then the
/// trailers (`grpc-status`) when the task ends (OK) or sends an error status.
pub struct ResponseBody {
    rx: mpsc::Receiver<Result<Bytes, Status>>,
    done: bool,
}

impl ResponseBody {
    pub fn new(rx: mpsc::Receiver<Result<Bytes, Status>>) -> Self {
        ResponseBody { rx, done: false }
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
        if self.done {
            return Poll::Ready(None);
        }
        let frame = match ready!(self.rx.poll_recv(cx)) {
            Some(Ok(bytes)) => Frame::data(bytes),
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
        self.done
    }
}

/// The response that starts a stream: headers now, the body as the task sends it.
pub fn streaming_response(
    rx: mpsc::Receiver<Result<Bytes, Status>>,
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
