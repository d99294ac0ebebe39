//! Failing over between replicas: when a proxy's Delta stream ends (its server was killed),
//! it opens a new one on the next server at once and resumes ([`Session`]); connections to
//! a server taken over are opened lazily, `streams_per_connection` streams each, as the
//! first ones were.

use super::*;

/// Consecutive streams that may fail to open before the proxy gives up (every server down), and the pause between two.
const ATTEMPTS: u32 = 50;
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The connections streams fail over onto, per server.
pub(super) struct Pool {
    servers: Vec<SocketAddr>,
    per_conn: usize,
    /// Per server: its failover connections, and how many streams were given one.
    by_server: Mutex<Vec<(Vec<Channel>, usize)>>,
}

impl Pool {
    pub(super) fn new(servers: Vec<SocketAddr>, per_conn: usize) -> Pool {
        let by_server = Mutex::new(vec![(Vec::new(), 0); servers.len()]);
        Pool {
            servers,
            per_conn: per_conn.max(1),
            by_server,
        }
    }

    fn len(&self) -> usize {
        self.servers.len()
    }

    /// A connection to `server` for one more stream: a new one every `per_conn` streams.
    fn channel(&self, server: usize) -> Result<Channel, String> {
        let addr = self
            .servers
            .get(server)
            .ok_or_else(|| format!("internal: no server {server}"))?;
        let mut by_server = self.by_server.lock().unwrap_or_else(|e| e.into_inner());
        let (channels, given) = &mut by_server[server];
        if (*given).is_multiple_of(self.per_conn) || channels.is_empty() {
            let uri = format!("http://{addr}");
            let ch = Endpoint::from_shared(uri.clone())
                .map_err(|e| format!("xDS address {uri}: {e}"))?
                .connect_timeout(Duration::from_secs(10))
                .connect_lazy();
            channels.push(ch);
        }
        *given += 1;
        channels
            .last()
            .cloned()
            .ok_or_else(|| "internal: no failover connection".to_string())
    }
}

/// A proxy's Delta streams, one after another: each that ends is followed by one on the
/// next server, resuming what the proxy holds. `Err` when [`ATTEMPTS`] streams in a row
/// failed to open.
pub(super) async fn run_failover(
    h: &ProxyHandle,
    shared: &Shared,
    pool: &Pool,
    mut channel: Channel,
    node: Node,
) -> Result<(), String> {
    let mut session = Session::default();
    let mut failed = 0;
    loop {
        session.live = false;
        let ended = match run_delta(h, shared, channel, node.clone(), &mut session).await {
            Ok(()) => "the server closed the stream".to_string(),
            Err(e) => e,
        };
        failed = if session.live { 1 } else { failed + 1 };
        if failed > ATTEMPTS {
            return Err(format!(
                "{ATTEMPTS} streams in a row failed; the last: {ended}"
            ));
        }
        if failed > 1 {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        let next = {
            let mut st = h.lock();
            st.disconnected = Some(ended);
            st.server = (st.server + 1) % pool.len();
            st.server
        };
        channel = pool.channel(next)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams failing over onto a server share its failover connections
    /// `streams_per_connection` at a time, counted per server, as the first connections
    /// were filled.
    #[tokio::test]
    async fn failover_connections_fill_per_server() {
        let servers: Vec<SocketAddr> = vec![
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ];
        let pool = Pool::new(servers, 2);
        for _ in 0..5 {
            pool.channel(0).unwrap();
        }
        pool.channel(1).unwrap();
        let by_server = pool.by_server.lock().unwrap();
        assert_eq!((by_server[0].0.len(), by_server[0].1), (3, 5));
        assert_eq!((by_server[1].0.len(), by_server[1].1), (1, 1));
        drop(by_server);
        assert!(pool.channel(2).is_err());
    }
}
