//! What every accepted xDS connection is set to, whichever way it is served (plain, or
//! behind the TLS acceptor).

/// `tcp` with Nagle's algorithm off. A push is one large write whose last segment is
/// short: with Nagle on, that segment waits for the ACK of the ones before it, which the
/// client's delayed ACK holds back for up to 40 ms, so a route configuration of a few
/// megabytes reached a gateway 40 ms late one push in a few. Our own incoming streams
/// bypass the server builder's `tcp_nodelay`, so it is set here. A socket that refuses is
/// still served (logged): slower, not wrong.
pub(super) fn no_delay(tcp: tokio::net::TcpStream) -> tokio::net::TcpStream {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::warn!(error = %e, "xDS connection: TCP_NODELAY not set");
    }
    tcp
}
