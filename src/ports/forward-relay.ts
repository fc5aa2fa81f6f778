import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { fstatSync } from 'node:fs';
import type { Socket } from 'node:net';
import { createInterface } from 'node:readline';
import type { Logger } from '../logger.js';
import { socketFd } from '../node-internals.js';
import { FORWARD_BUFFER_BYTES } from './byte-pump.js';

/** A connection handed to the relay: what to do if it refuses, and when it ended. */
interface Handed {
  /** Until the relay took it (then envd's socket is closed and let go: a thousand idle connections keep no Socket here). */
  client: Socket | undefined;
  refused: () => void;
  ended: () => void;
}

/**
 * The loopback forward's relay, `envd-holder --forward` (src/holder/forward.h):
 * one child of envd that takes each forwarded connection's client socket
 * (pidfd_getfd of envd's fd), connects to the loopback listener and copies
 * both directions by splice(2), so the bytes never cross envd's event loop.
 * It also steers ports into their listeners in the kernel (steer()), where a
 * connection never reaches envd or the relay at all; its BPF link lives as
 * long as this child does.
 * Started at the first steer or connection; a connection it cannot take (no
 * pidfd_getfd in this kernel, not allowed, Node's socket internals not
 * trusted, the relay gone) is copied by envd itself (byte-pump.ts).
 */
export class ForwardRelay {
  private child: ChildProcessWithoutNullStreams | undefined;
  private failed = false;
  private nextId = 1;
  private readonly handed = new Map<number, Handed>();
  /** Steers asked for and not yet answered: what to tell their asker. */
  private readonly steers = new Map<number, (steered: boolean) => void>();
  private saidUnsteered = false;

  constructor(
    private readonly holderPath: string,
    private readonly log: Logger,
    private readonly bufferBytes = FORWARD_BUFFER_BYTES,
    /** --forward-steering: off, every connection is relayed (steer answers false at once). */
    readonly steering = true,
  ) {}

  /**
   * Asks the relay to steer new TCP connections to `address`:`port` straight
   * into the listener `fd` (socket `inode`) of process `pid`, in the kernel
   * (src/holder/steer.h); `done(true)` once it does, `done(false)` if it
   * cannot (then the port is relayed, as before).
   */
  steer(pid: number, fd: number, inode: number, address: string, port: number, done: (steered: boolean) => void): void {
    const relay = this.steering ? this.running() : undefined;
    if (!relay) return done(false);
    const id = this.nextId++;
    this.steers.set(id, done);
    relay.stdin.write(`steer ${id} ${pid} ${fd} ${inode} ${address} ${port}\n`);
  }

  /** Stops steering `address`:`port` (its listener closed, or forwarding is off). */
  unsteer(address: string, port: number): void {
    this.child?.stdin.write(`unsteer ${address} ${port}\n`);
  }

  /** Hands `client` (paused, never read) to the relay; `refused` if envd must copy it itself, `ended` once the relay closed it. */
  hand(client: Socket, address: string, port: number, refused: () => void, ended: () => void): void {
    const fd = socketFd(client);
    const relay = fd === undefined ? undefined : this.running();
    if (fd === undefined || !relay) return refused();
    let inode: number;
    try {
      inode = fstatSync(fd).ino;
    } catch {
      return refused();
    }
    const id = this.nextId++;
    this.handed.set(id, { client, refused, ended });
    relay.stdin.write(`take ${id} ${fd} ${inode} ${address} ${port}\n`);
  }

  /** Ends the relay and every connection it holds (envd is closing). */
  stop(): void {
    this.child?.kill('SIGKILL');
  }

  private running(): ChildProcessWithoutNullStreams | undefined {
    if (this.failed) return undefined;
    if (this.child) return this.child;
    // stdin is envd's line to it: when envd exits its end closes and the relay ends with its connections.
    const child = spawn(this.holderPath, ['--forward', String(process.pid), String(this.bufferBytes)], { env: {}, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    let reason = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (text: string) => (reason = (reason + text).slice(0, 1024)));
    child.stdin.on('error', () => {});
    createInterface({ input: child.stdout }).on('line', (line) => this.onLine(line));
    child.on('error', (error) => (reason ||= error.message));
    child.on('close', (code, signal) => {
      this.failed = true;
      this.child = undefined;
      if (signal !== 'SIGKILL') this.log.warn({ reason: reason.trim() || `exited (${signal ?? code})` }, 'the forward relay ended: envd copies forwarded connections itself');
      for (const connection of this.handed.values()) (connection.client ? connection.refused : connection.ended)();
      this.handed.clear();
      // Its link to the network namespace closed with it: nothing is steered any more, envd's listeners take every connection.
      for (const done of this.steers.values()) done(false);
      this.steers.clear();
    });
    return child;
  }

  private onLine(line: string): void {
    const [what, idText] = line.split(' ');
    const id = Number(idText);
    const steered = this.steers.get(id);
    if (steered) {
      this.steers.delete(id);
      if (what === 'unsteered') this.unsteeredOnce(line);
      return steered(what === 'steered');
    }
    const connection = this.handed.get(id);
    if (!connection) return;
    if (what === 'taken') {
      // The relay holds its own descriptor of the socket: envd's is closed, not shut down, so the connection goes on there.
      connection.client?.destroy();
      connection.client = undefined;
      connection.refused = () => {};
    } else if (what === 'refused') {
      this.handed.delete(id);
      this.refusedOnce(line);
      connection.refused();
    } else if (what === 'closed') {
      this.handed.delete(id);
      connection.ended();
    }
  }

  private saidRefused = false;

  /** Once: no BPF in this kernel, not allowed, ... (every port is then relayed, and the first reason says why). */
  private unsteeredOnce(line: string): void {
    if (this.saidUnsteered) return;
    this.saidUnsteered = true;
    this.log.info({ answer: line }, 'a forwarded port could not be steered into its listener in the kernel: its connections are relayed');
  }

  private refusedOnce(line: string): void {
    if (this.saidRefused) return;
    this.saidRefused = true;
    this.log.info({ answer: line }, 'the forward relay could not take a connection: envd copies it itself');
  }
}
