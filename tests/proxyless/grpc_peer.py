"""Both ends of the proxyless gRPC test, with Python's grpcio (from PyPI) and nothing else.

    grpc_peer.py serve IP:PORT=NAME [IP:PORT=NAME ...]
        Runs a gRPC server per address whose one unary method answers NAME; prints "ready"
        once every server listens, then serves until killed.

    grpc_peer.py call TARGET COUNT [KEY=VALUE ...]
        Makes COUNT unary calls to TARGET (e.g. xds:///reviews.default.svc.cluster.local:9080,
        resolved through the control plane named by $GRPC_XDS_BOOTSTRAP), each with the given
        metadata, on one channel; prints a JSON object counting the answers by NAME, with
        failures counted under "error: <status code>".

The method is raw bytes in and out (no generated code), so the test needs no protoc.
"""

import json
import sys
from concurrent import futures

import grpc

SERVICE = "meshflow.test.Echo"
METHOD = f"/{SERVICE}/Hello"


def serve(specs):
    servers = []
    for spec in specs:
        addr, name = spec.split("=", 1)
        answer = name.encode()

        def hello(_request, _context, answer=answer):
            return answer

        handler = grpc.method_handlers_generic_handler(
            SERVICE, {"Hello": grpc.unary_unary_rpc_method_handler(hello)}
        )
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((handler,))
        if server.add_insecure_port(addr) == 0:
            raise SystemExit(f"cannot listen on {addr}")
        server.start()
        servers.append(server)
    print("ready", flush=True)
    servers[0].wait_for_termination()


def call(target, count, metadata):
    counts = {}
    with grpc.insecure_channel(target) as channel:
        hello = channel.unary_unary(METHOD)
        for _ in range(count):
            try:
                # wait_for_ready: the first call waits for xDS resolution instead of failing.
                answer = hello(b"", timeout=20, wait_for_ready=True, metadata=metadata)
                key = answer.decode()
            except grpc.RpcError as err:
                key = f"error: {err.code().name} {err.details()}"
            counts[key] = counts.get(key, 0) + 1
    print(json.dumps(counts), flush=True)


def main(argv):
    if len(argv) >= 2 and argv[0] == "serve":
        serve(argv[1:])
    elif len(argv) >= 3 and argv[0] == "call":
        metadata = [tuple(kv.split("=", 1)) for kv in argv[3:]]
        call(argv[1], int(argv[2]), metadata)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
