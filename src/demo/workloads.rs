//! The bookinfo workloads: one small HTTP server per serving pod, on the pod's loopback
//! address, answering every request with the pod's name (body and `x-backend` header, as
//! `examples/bookinfo/fake_pods.py` and the tests' backends do), so the demo can tell where a
//! request landed. They run on the demo's tokio runtime and stop when dropped.

use super::config::Pod;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The header naming the pod that answered.
pub const BACKEND_HEADER: &str = "x-backend";

/// How many times to look for a port free on every pod address before giving up.
const PORT_ATTEMPTS: usize = 20;

/// The running workloads.
pub struct Workloads {
    pub port: u16,
    pub pods: Vec<Pod>,
    tasks: Vec<JoinHandle<()>>,
}

impl Workloads {
    /// Binds one port, the same on every pod address (the EndpointSlices have one port per
    /// service), chosen by the system for the first pod and tried on the others; and serves.
    pub async fn start(pods: Vec<Pod>) -> Result<Workloads, String> {
        let first = pods
            .first()
            .ok_or("the bundled example has no serving pods")?;
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let l = TcpListener::bind(first.addr(0))
                .await
                .map_err(|e| cannot_bind(first.addr(0), &e))?;
            let port = l.local_addr().map_err(|e| e.to_string())?.port();
            let mut listeners = vec![l];
            for pod in &pods[1..] {
                match TcpListener::bind(pod.addr(port)).await {
                    Ok(l) => listeners.push(l),
                    Err(e) => {
                        last_error = cannot_bind(pod.addr(port), &e);
                        break;
                    }
                }
            }
            if listeners.len() == pods.len() {
                let tasks = pods
                    .iter()
                    .zip(listeners)
                    .map(|(pod, l)| tokio::spawn(serve(l, pod.name.clone())))
                    .collect();
                return Ok(Workloads { port, pods, tasks });
            }
        }
        Err(format!(
            "no port free on every pod address after {PORT_ATTEMPTS} tries: {last_error}"
        ))
    }
}

impl Drop for Workloads {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn cannot_bind(addr: SocketAddr, e: &std::io::Error) -> String {
    format!(
        "cannot listen on {addr} (a bookinfo pod's address; Linux routes all of 127.0.0.0/8 \
         to loopback, some other systems only 127.0.0.1): {e}"
    )
}

/// Accepts connections until aborted; each is served on its own task.
async fn serve(listener: TcpListener, pod: String) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors or the like: wait rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let pod = pod.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                let pod = pod.clone();
                async move {
                    let mut response = Response::new(format!("{pod}\n"));
                    if let Ok(value) = pod.parse() {
                        response.headers_mut().insert(BACKEND_HEADER, value);
                    }
                    Ok::<_, Infallible>(response)
                }
            });
            // A client that goes away mid-request is no concern of the demo's.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
