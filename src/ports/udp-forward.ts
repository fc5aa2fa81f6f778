import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { isIPv4 } from 'node:net';
import type { Logger } from '../logger.js';

/**
 * UDP flows open at once, over every forwarded port: one per client address
 * and port, each an upstream socket of envd's (~2 KiB and one descriptor).
 * Past it a new client's datagrams are dropped (UDP may lose them) and the
 * reason logged once.
 */
export const MAX_UDP_FLOWS = 1024;
/** A flow with no datagram either way for this long is closed: the next datagram from that client starts a new one (conntrack's UDP stream timeout is of this order). */
export const UDP_FLOW_IDLE_MS = 60_000;
/** Datagrams a new flow keeps while its upstream socket connects; more are dropped. */
const MAX_QUEUED_DATAGRAMS = 16;

/** What all UDP forwards share: the flow count and its limit, and whether the limit was said. */
export class UdpFlowBudget {
  open = 0;
  saidFull = false;
  constructor(
    readonly limit = MAX_UDP_FLOWS,
    readonly idleMs = UDP_FLOW_IDLE_MS,
  ) {}
}

/** One client's flow: datagrams from it go out of `upstream` (connected to the loopback socket); the answers come back to it. */
interface Flow {
  upstream: Socket;
  queued: Buffer[] | undefined;
  lastActive: number;
}

/**
 * One loopback-only UDP port made reachable: a socket of envd's on each
 * forward address, and a flow per client. A datagram from a new client
 * address opens an upstream socket connected to the loopback socket, so the
 * server sees one peer per client and its answers go back to that client
 * from the forward address, as they would on a direct path. Flows end after
 * UDP_FLOW_IDLE_MS without traffic, and all of them at the loopback socket's
 * close.
 */
export class UdpPortForward {
  private readonly sockets = new Map<string, Socket>();
  private readonly flows = new Map<string, Flow>();
  private sweeper: NodeJS.Timeout | undefined;
  /** The loopback sockets on this port (127.0.0.1 and ::1 may both be there). */
  targets: string[] = [];

  constructor(
    readonly port: number,
    private readonly budget: UdpFlowBudget,
    private readonly log: Logger,
  ) {}

  /** Whether envd's forward socket is at this address. */
  has(address: string): boolean {
    return this.sockets.has(address);
  }

  get flowCount(): number {
    return this.flows.size;
  }

  listen(address: string): void {
    const socket = createSocket({ type: isIPv4(address) ? 'udp4' : 'udp6', ipv6Only: !isIPv4(address) });
    this.sockets.set(address, socket);
    socket.once('error', (error: NodeJS.ErrnoException) => {
      this.sockets.delete(address);
      socket.close();
      if (error.code === 'EADDRINUSE') this.log.info({ address, port: this.port, protocol: 'udp' }, 'not forwarding a loopback port: something already holds it at this address');
      else this.log.warn({ address, port: this.port, protocol: 'udp', err: error }, 'cannot forward a loopback port to this address');
    });
    socket.on('message', (datagram, from) => this.fromClient(socket, address, datagram, from));
    socket.bind({ address, port: this.port, exclusive: true });
  }

  close(): void {
    for (const socket of this.sockets.values()) socket.close();
    this.sockets.clear();
    for (const key of [...this.flows.keys()]) this.end(key);
  }

  private fromClient(socket: Socket, address: string, datagram: Buffer, from: RemoteInfo): void {
    const key = `${from.address} ${from.port} ${address}`;
    const flow = this.flows.get(key) ?? this.open(key, socket, address, from);
    if (!flow) return;
    flow.lastActive = performance.now();
    if (!flow.queued) return void flow.upstream.send(datagram);
    if (flow.queued.length < MAX_QUEUED_DATAGRAMS) flow.queued.push(datagram);
  }

  private open(key: string, socket: Socket, address: string, client: RemoteInfo): Flow | undefined {
    if (this.budget.open >= this.budget.limit) {
      if (!this.budget.saidFull) this.log.warn({ limit: this.budget.limit }, 'dropping datagrams of new UDP clients: too many forwarded flows at once');
      this.budget.saidFull = true;
      return undefined;
    }
    this.budget.saidFull = false;
    const target = this.targets.find((t) => isIPv4(t) === isIPv4(address)) ?? this.targets[0];
    if (!target) return undefined;
    const upstream = createSocket(isIPv4(target) ? 'udp4' : 'udp6');
    const flow: Flow = { upstream, queued: [], lastActive: performance.now() };
    this.flows.set(key, flow);
    this.budget.open++;
    upstream.on('error', () => this.end(key)); // the loopback socket is gone (ECONNREFUSED): so is the flow
    upstream.on('message', (answer) => {
      flow.lastActive = performance.now();
      socket.send(answer, client.port, client.address);
    });
    upstream.connect(this.port, target, () => {
      for (const datagram of flow.queued ?? []) upstream.send(datagram);
      flow.queued = undefined;
    });
    this.sweeper ??= setInterval(() => this.sweep(), Math.max(this.budget.idleMs / 4, 10)).unref();
    return flow;
  }

  private sweep(): void {
    const now = performance.now();
    for (const [key, flow] of this.flows) if (now - flow.lastActive >= this.budget.idleMs) this.end(key);
  }

  private end(key: string): void {
    const flow = this.flows.get(key);
    if (!flow) return;
    this.flows.delete(key);
    this.budget.open--;
    flow.upstream.close();
    if (this.flows.size > 0 || !this.sweeper) return;
    clearInterval(this.sweeper);
    this.sweeper = undefined;
  }
}
