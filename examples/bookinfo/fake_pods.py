#!/usr/bin/env python3
"""Stand-ins for the bookinfo pods of config/pods.yaml: one HTTP server per pod IP on port 9080,
answering every request with the pod's name (body and `x-backend` header), so you can see where
Envoy sent a request. Standard library only; Ctrl-C stops them all."""

import http.server
import threading

PODS = {
    "details-v1": "127.0.1.11",
    "ratings-v1": "127.0.1.21",
    "reviews-v1": "127.0.1.31",
    "reviews-v2": "127.0.1.32",
    "reviews-v3": "127.0.1.33",
    "productpage-v1": "127.0.1.41",
}
PORT = 9080


def handler_for(pod: str) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = f"{pod}\n".encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.send_header("x-backend", pod)
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, fmt: str, *args) -> None:
            print(f"{pod}: {self.command} {self.path} (Host: {self.headers.get('Host')})")

    return Handler


def main() -> None:
    servers = [
        http.server.ThreadingHTTPServer((ip, PORT), handler_for(pod)) for pod, ip in PODS.items()
    ]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        print(f"listening on {server.server_address[0]}:{PORT}")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
