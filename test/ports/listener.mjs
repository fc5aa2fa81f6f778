// A test listener: `node listener.mjs tcp|udp HOST [--share] [--port-file PATH]`.
// Binds HOST on a free port and prints `PORT` (with --share: `PORT SHARER_PID`, where
// the sharer is a `sleep` it started after the bind that inherited the socket, as a
// pre-forking server's workers do). --port-file writes the line there too. Stays until killed.
import { spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';

const [protocol, host, ...rest] = process.argv.slice(2);
const share = rest.includes('--share');
const portFile = rest.includes('--port-file') ? rest[rest.indexOf('--port-file') + 1] : undefined;

function ready(port, handle) {
  // handle() only when sharing: dgram's _handle is deprecated, and only the TCP case shares.
  let line = String(port);
  if (share) {
    const sharer = spawn('sleep', ['300'], { stdio: ['ignore', 'ignore', 'ignore', handle().fd] });
    line += ` ${sharer.pid}`;
  }
  if (portFile) writeFileSync(portFile, `${line}\n`);
  process.stdout.write(`${line}\n`);
}

if (protocol === 'tcp') {
  const server = createServer().listen(0, host, () => ready(server.address().port, () => server._handle));
} else {
  const socket = createSocket(host.includes(':') ? 'udp6' : 'udp4');
  socket.bind(0, host, () => ready(socket.address().port, () => socket._handle));
}
setInterval(() => {}, 60_000);
