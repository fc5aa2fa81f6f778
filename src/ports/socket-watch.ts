import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { BoundSocket } from './proc-net.js';

/**
 * The guest's listening sockets as `envd-holder --watch-sockets` reports them
 * (src/holder/sockets.h): a sock_diag netlink dump of the listening hash only,
 * which Node cannot make itself. Far cheaper than reading /proc/net, whose
 * TCP tables walk the whole established hash (docs/api.md, "Ports").
 */
export interface SocketWatch {
  stop(): void;
}

export interface SocketWatchHandlers {
  /** Every socket now, whenever the set changed (the first set at once). */
  onSet(sockets: BoundSocket[]): void;
  /** The watch ended without stop(): netlink is unavailable here, or the child died. */
  onFail(reason: string): void;
}

export type StartSocketWatch = (intervalMs: number, maxSockets: number, handlers: SocketWatchHandlers) => SocketWatch;

/** The stderr kept for onFail's reason: the child writes one line. */
const MAX_REASON_BYTES = 1024;

/** Parses one line of a set, `PROTOCOL ADDRESS PORT INODE UID`; undefined for anything else. */
export function parseSocketLine(line: string): BoundSocket | undefined {
  const [protocol, address, port, inode, uid, extra] = line.split(' ');
  if ((protocol !== 'tcp' && protocol !== 'udp') || !address || extra !== undefined) return undefined;
  const numbers = [port, inode, uid].map(Number);
  if (numbers.some((n) => !Number.isSafeInteger(n) || n < 0)) return undefined;
  return { protocol, address, port: numbers[0]!, inode: numbers[1]!, uid: numbers[2]! };
}

export function socketWatcher(holderPath: string): StartSocketWatch {
  return (intervalMs, maxSockets, { onSet, onFail }) => {
    // stdin is a pipe nothing is written to: when envd exits its end closes and the child ends too.
    const child = spawn(holderPath, ['--watch-sockets', String(intervalMs), String(maxSockets)], { env: {}, stdio: ['pipe', 'pipe', 'pipe'] });
    let stopped = false;
    let reason = '';
    let set: BoundSocket[] = [];
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (text: string) => {
      if (reason.length < MAX_REASON_BYTES) reason += text.slice(0, MAX_REASON_BYTES - reason.length);
    });
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (stopped) return;
      if (line !== '.') {
        const socket = parseSocketLine(line);
        if (socket) set.push(socket);
        return;
      }
      const done = set;
      set = [];
      onSet(done);
    });
    child.stdin.on('error', () => {});
    const fail = (why: string) => {
      if (stopped) return;
      stopped = true;
      child.kill('SIGKILL');
      onFail(why);
    };
    child.on('error', (error) => fail(error.message));
    child.on('close', (code, signal) => fail(reason.trim() || `envd-holder --watch-sockets exited (${signal ?? code})`));
    return {
      stop() {
        if (stopped) return;
        stopped = true;
        child.kill('SIGKILL');
      },
    };
  };
}
