//! The ADS response framing of `meshflow::xds::grpc`: a response is the gRPC prefix and the
//! protobuf, and a stream's body ends with `grpc-status` trailers (the task's error status,
//! or OK when the task ends). The real-client side of the framing is covered by
//! `tests/xds/protocol.rs` and the Envoy tests.

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse;
use http_body_util::BodyExt;
use meshflow::xds::grpc::{frame, ResponseBody, PREFIX};
use prost::Message;
use tokio::sync::mpsc;
use tonic::codegen::http::HeaderMap;
use tonic::Status;

#[test]
fn frame_is_prefix_and_message() {
    let m = DeltaDiscoveryResponse {
        nonce: "7".into(),
        type_url: "t".into(),
        ..Default::default()
    };
    let b = frame(&m).unwrap();
    assert_eq!(b[0], 0);
    let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
    assert_eq!(len, b.len() - PREFIX);
    assert_eq!(DeltaDiscoveryResponse::decode(&b[PREFIX..]).unwrap(), m);
}

async fn trailers_of(body: &mut ResponseBody) -> HeaderMap {
    let frame = body.frame().await.unwrap().unwrap();
    frame.into_trailers().unwrap()
}

#[tokio::test]
async fn body_ends_with_status_trailers() {
    let (tx, rx) = mpsc::channel(4);
    // A response of two chunks, one of none, one of one: each chunk is a data frame, in
    // order.
    let chunks = |c: &[&'static [u8]]| c.iter().map(|b| Bytes::from_static(b)).collect();
    tx.send(Ok(chunks(&[b"abc", b"de"]))).await.unwrap();
    tx.send(Ok(chunks(&[]))).await.unwrap();
    tx.send(Ok(chunks(&[b"f"]))).await.unwrap();
    tx.send(Err(Status::invalid_argument("bad node")))
        .await
        .unwrap();
    let mut body = ResponseBody::new(rx);
    for expected in [&b"abc"[..], b"de", b"f"] {
        let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&data[..], expected);
    }
    let t = trailers_of(&mut body).await;
    assert_eq!(t.get("grpc-status").unwrap(), "3");
    assert_eq!(t.get("grpc-message").unwrap(), "bad%20node");
    assert!(body.frame().await.is_none());

    // The task ended without an error: OK.
    let (tx, rx) = mpsc::channel(1);
    drop(tx);
    let mut body = ResponseBody::new(rx);
    assert_eq!(
        trailers_of(&mut body).await.get("grpc-status").unwrap(),
        "0"
    );
}
