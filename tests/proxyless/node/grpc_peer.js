// Both ends of the proxyless gRPC test with Node's @grpc/grpc-js and @grpc/grpc-js-xds (from
// the npm registry, pinned in package-lock.json, installed by scripts/install-test-deps.sh).
// The same command line as ../grpc_peer.py, so tests/proxyless_grpc.rs drives either:
//
//   node grpc_peer.js serve IP:PORT=NAME [IP:PORT=NAME ...]
//       A gRPC server per address whose one unary method answers NAME; prints "ready" once
//       every server listens, then serves until killed.
//
//   node grpc_peer.js call TARGET COUNT [KEY=VALUE ...]
//       COUNT unary calls to TARGET (xds:///HOST:PORT, resolved through the control plane of
//       $GRPC_XDS_BOOTSTRAP), each with the given metadata, on one channel; prints a JSON
//       object counting the answers by NAME, failures under "error: <code> <details>".
//
// The method is raw bytes in and out (no generated code, no proto files).
'use strict';

const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');

const METHOD = '/meshflow.test.Echo/Hello';
const raw = (b) => b;

async function serve(specs) {
  const servers = [];
  for (const spec of specs) {
    const eq = spec.indexOf('=');
    const addr = spec.slice(0, eq);
    const answer = Buffer.from(spec.slice(eq + 1));
    const server = new grpc.Server();
    server.register(METHOD, (_call, callback) => callback(null, answer), raw, raw, 'unary');
    await new Promise((resolve, reject) =>
      server.bindAsync(addr, grpc.ServerCredentials.createInsecure(), (err) =>
        err ? reject(new Error(`cannot listen on ${addr}: ${err.message}`)) : resolve()));
    servers.push(server);
  }
  process.stdout.write('ready\n');
}

function hello(client, metadata) {
  return new Promise((resolve) => {
    const md = new grpc.Metadata();
    for (const [k, v] of metadata) md.add(k, v);
    // waitForReady: the first call waits for xDS resolution instead of failing.
    const options = { deadline: Date.now() + 20000, waitForReady: true };
    client.makeUnaryRequest(METHOD, raw, raw, Buffer.alloc(0), md, options, (err, answer) => {
      if (err) {
        resolve(`error: ${grpc.status[err.code]} ${err.details}`);
      } else {
        resolve(answer.toString());
      }
    });
  });
}

async function call(target, count, metadata) {
  xds.register();
  const client = new grpc.Client(target, grpc.credentials.createInsecure());
  const counts = {};
  for (let i = 0; i < count; i++) {
    const key = await hello(client, metadata);
    counts[key] = (counts[key] || 0) + 1;
  }
  client.close();
  process.stdout.write(JSON.stringify(counts) + '\n');
  // The xDS client keeps its stream to the control plane open; the answer is out.
  process.exit(0);
}

function main(argv) {
  if (argv.length >= 2 && argv[0] === 'serve') {
    return serve(argv.slice(1));
  }
  if (argv.length >= 3 && argv[0] === 'call') {
    const metadata = argv.slice(3).map((kv) => {
      const eq = kv.indexOf('=');
      return [kv.slice(0, eq), kv.slice(eq + 1)];
    });
    return call(argv[1], Number(argv[2]), metadata);
  }
  process.stderr.write('usage: grpc_peer.js serve IP:PORT=NAME... | call TARGET COUNT [KEY=VALUE...]\n');
  process.exit(2);
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
