import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, expect, it } from 'vitest';
import { waitFor } from '../helpers/proc.js';

// Its own address: the other forward tests run at the same time with envds of their own.
const FORWARD = '127.0.0.5';
/** Two servers on 127.0.0.1 that answer each connection with the peer they saw. */
const PEER_SERVERS = `
const net = require('node:net');
const ports = [];
for (let i = 0; i < 2; i++) {
  const server = net.createServer((socket) => socket.end(socket.remoteAddress + ' ' + socket.remotePort));
  server.listen(0, '127.0.0.1', () => {
    ports.push(server.address().port);
    if (ports.length === 2) require('node:fs').writeFileSync(process.argv[1], ports.join(' '));
  });
}`;

const dir = mkdtempSync(join(tmpdir(), 'envd-forward-fallback-'));
let envd: ChildProcess | undefined;
afterAll(() => {
  envd?.kill('SIGKILL');
  try {
    process.kill(Number(readFileSync(join(dir, 'servers.pid'), 'utf8')), 'SIGKILL');
  } catch {
    // never started
  }
  rmSync(dir, { recursive: true, force: true });
});

function greeting(port: number): Promise<{ text: string; localPort?: number }> {
  return new Promise((resolve) => {
    const socket = connect({ host: FORWARD, port });
    let text = '';
    socket.setEncoding('utf8').on('data', (chunk) => (text += chunk));
    socket.once('end', () => resolve({ text, localPort: socket.localPort }));
    socket.once('error', () => resolve({ text: '' }));
  });
}

it('relays when bpf() is refused (envd as root of a user namespace has no CAP_BPF), and says so once', { timeout: 30_000 }, async () => {
  // The servers start in the same user namespace, so envd may take their listeners (pidfd_getfd); what it may not is bpf().
  const portsFile = join(dir, 'ports');
  const script = `node -e "$1" ${portsFile} & echo $! > ${join(dir, 'servers.pid')}; exec "$2" --host 127.0.0.1 --port 0 --state-dir ${dir}/state --spool-dir ${dir}/spool --command-cgroups off --forward-address ${FORWARD}`;
  envd = spawn('unshare', ['--user', '--map-root-user', 'sh', '-c', script, 'sh', PEER_SERVERS, `${process.cwd()}/dist/envd`], {
    env: { PATH: process.env.PATH, ENVD_FORWARD_LOOPBACK: 'on' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  createInterface({ input: envd.stdout! }).on('line', (line) => lines.push(line));
  await waitFor(() => {
    try {
      return readFileSync(portsFile, 'utf8').split(' ').length === 2;
    } catch {
      return false;
    }
  }, 10_000, 'the servers to listen');
  const ports = readFileSync(portsFile, 'utf8').split(' ').map(Number);
  for (const port of ports) {
    await waitFor(async () => (await greeting(port)).text !== '', 10_000, `${FORWARD}:${port} to be forwarded`);
    const { text, localPort } = await greeting(port);
    // Relayed: the server's peer is the relay's own connection from loopback, not this client.
    const [address, peerPort] = text.split(' ');
    expect(address).toBe('127.0.0.1');
    expect(Number(peerPort)).not.toBe(localPort);
  }
  const said = lines.filter((line) => line.includes('could not be steered'));
  expect(said).toHaveLength(1);
  expect(said[0]).toContain('EPERM');
});
