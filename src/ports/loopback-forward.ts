import { connect, createServer, isIPv4, type Server, type Socket } from 'node:net';
import type { Logger } from '../logger.js';
import { ForwardBuffers, pump } from './byte-pump.js';
import type { ForwardRelay } from './forward-relay.js';
import { ForwardSteering } from './forward-steering.js';
import type { PortEntry, PortListener, PortTable } from './port-table.js';
import { isForwardedLoopback } from './proc-net.js';
import { UdpFlowBudget, UdpPortForward } from './udp-forward.js';

/**
 * Forwarded connections open at once, over every port. Each costs two sockets
 * of envd's (~5 KiB idle, docs/performance.md) and two descriptors; past this
 * a new connection is reset and the reason logged once.
 */
export const MAX_FORWARDED_CONNECTIONS = 4096;

/** One loopback-only port made reachable: its loopback listeners, and envd's listeners on the other addresses. */
interface PortForward {
  port: number;
  /** The loopback listeners on this port (127.0.0.1 and ::1 may both be there). */
  targets: PortEntry[];
  /** envd's listener on each forward address. */
  servers: Map<string, Server>;
}

/**
 * Makes every TCP listener (and bound UDP socket, udp-forward.ts) bound only to loopback (127.0.0.1, ::1) reachable
 * on the guest's other addresses, on the same port: a dev server that binds
 * 127.0.0.1 (most do by default) is reached by the traffic proxy at the
 * guest's address. envd listens there while the loopback listener is there
 * (the port table tells it within a poll of the listen and of the close). A
 * TCP port is then steered into the user's listener in the kernel
 * (forward-steering.ts), where BPF allows: its connections never reach envd.
 * What reaches envd's listener (UDP, a kernel without BPF, --forward-steering
 * off) is copied both ways unchanged, half-closes included, by the relay
 * (forward-relay.ts) or envd itself (byte-pump.ts). An address where something else already holds
 * that port is left alone, said once in the log.
 */
export class LoopbackForwarder implements PortListener {
  private readonly forwards = new Map<number, PortForward>();
  private readonly udpForwards = new Map<number, UdpPortForward>();
  private unsubscribe: (() => void) | undefined;
  private connections = 0;
  private saidFull = false;
  readonly buffers = new ForwardBuffers();
  /** TCP ports steered into their listeners in the kernel; whatever is not reaches envd's listeners and is relayed. */
  readonly steering: ForwardSteering;

  constructor(
    private readonly table: PortTable,
    /** Where to listen: the guest's non-loopback addresses, or --forward-address. */
    private readonly addresses: () => string[],
    private readonly log: Logger,
    private readonly maxConnections = MAX_FORWARDED_CONNECTIONS,
    /** Copies connections outside envd's event loop; without it envd copies them. */
    private readonly relay?: ForwardRelay,
    readonly udpFlows = new UdpFlowBudget(),
  ) {
    table.isHidden = (entry) => this.isOwn(entry);
    this.steering = new ForwardSteering(relay, (entry) => table.inodeOf(entry));
  }

  get enabled(): boolean {
    return this.unsubscribe !== undefined;
  }

  /** Forwarded connections open now. */
  get connectionCount(): number {
    return this.connections;
  }

  /** Turns forwarding on (every loopback listener open now, then each one that opens) or off (envd's listeners close; open connections run to their end). */
  enable(on: boolean): void {
    if (on === this.enabled) return;
    if (on) {
      this.unsubscribe = this.table.subscribe(this);
      for (const entry of this.table.entries()) this.onOpen(entry);
      this.log.info({ addresses: this.addresses() }, 'loopback listeners are made reachable on the guest addresses');
    } else {
      this.unsubscribe!();
      this.unsubscribe = undefined;
      for (const forward of this.forwards.values()) this.stop(forward);
      this.forwards.clear();
      for (const forward of this.udpForwards.values()) forward.close();
      this.udpForwards.clear();
      this.log.info('loopback forwarding is off');
    }
  }

  /** envd is closing: forwarding stops, and the relay's connections end with it. */
  close(): void {
    this.enable(false);
    this.relay?.stop();
  }

  onOpen(entry: PortEntry): void {
    if (!this.isTarget(entry)) return;
    if (entry.protocol === 'udp') return this.openUdp(entry);
    let forward = this.forwards.get(entry.port);
    if (forward) {
      forward.targets.push(entry);
      return this.steer(forward);
    }
    forward = { port: entry.port, targets: [entry], servers: new Map() };
    this.forwards.set(entry.port, forward);
    for (const address of this.addresses()) this.listen(forward, address);
  }

  onClose(entry: PortEntry): void {
    if (entry.protocol === 'udp') return this.closeUdp(entry);
    const forward = this.forwards.get(entry.port);
    if (!forward) return;
    forward.targets = forward.targets.filter((target) => target !== entry);
    if (forward.targets.length > 0) return this.steer(forward);
    this.stop(forward);
    this.forwards.delete(entry.port);
  }

  private openUdp(entry: PortEntry): void {
    let forward = this.udpForwards.get(entry.port);
    if (forward) return void forward.targets.push(entry.address);
    forward = new UdpPortForward(entry.port, this.udpFlows, this.log);
    forward.targets.push(entry.address);
    this.udpForwards.set(entry.port, forward);
    for (const address of this.addresses()) forward.listen(address);
  }

  private closeUdp(entry: PortEntry): void {
    const forward = this.udpForwards.get(entry.port);
    if (!forward) return;
    const at = forward.targets.indexOf(entry.address);
    if (at >= 0) forward.targets.splice(at, 1);
    if (forward.targets.length > 0) return;
    forward.close();
    this.udpForwards.delete(entry.port);
  }

  /**
   * A TCP listener or bound UDP socket on 127.0.0.1 or ::1 that is not envd's own (a forward address may
   * itself be loopback, 127.0.0.2 in tests). Not the rest of 127.0.0.0/8: a resolver's stub
   * (127.0.0.53) is not meant for the outside, and a second envd's forwarding listener on
   * 127.0.0.x (two on one test machine) would otherwise be taken for a server, each keeping the
   * other's forward open after the real server closed.
   */
  private isTarget(entry: PortEntry): boolean {
    return isForwardedLoopback(entry.address) && !this.isOwn(entry) && !this.addresses().includes(entry.address);
  }

  private isOwn(entry: PortEntry): boolean {
    if (entry.pid !== process.pid) return false;
    if (entry.protocol === 'udp') return this.udpForwards.get(entry.port)?.has(entry.address) === true;
    return this.forwards.get(entry.port)?.servers.has(entry.address) === true;
  }

  private listen(forward: PortForward, address: string): void {
    const server = createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true }, (client) => this.accept(client, forward, address));
    forward.servers.set(address, server);
    server.once('error', (error: NodeJS.ErrnoException) => {
      forward.servers.delete(address);
      // Once per listen of the loopback port: the next listen of it tries again.
      if (error.code === 'EADDRINUSE') this.log.info({ address, port: forward.port }, 'not forwarding a loopback port: something already listens on it at this address');
      else this.log.warn({ address, port: forward.port, err: error }, 'cannot forward a loopback port to this address');
    });
    // Steered only once envd's listener holds the address:port (no other program has it, and it takes what is not steered).
    server.once('listening', () => {
      if (forward.servers.get(address) === server) this.steering.update(address, forward.port, forward.targets);
    });
    server.listen({ host: address, port: forward.port, exclusive: true });
  }

  /** The port's targets changed: each address envd listens on is steered to the listener of its family now. */
  private steer(forward: PortForward): void {
    for (const [address, server] of forward.servers) if (server.listening) this.steering.update(address, forward.port, forward.targets);
  }

  private stop(forward: PortForward): void {
    for (const [address, server] of forward.servers) {
      this.steering.stop(address, forward.port);
      server.close(() => {});
    }
    forward.servers.clear();
  }

  private accept(client: Socket, forward: PortForward, address: string): void {
    if (this.connections >= this.maxConnections) {
      if (!this.saidFull) this.log.warn({ limit: this.maxConnections }, 'refusing forwarded connections: too many open at once');
      this.saidFull = true;
      return void client.resetAndDestroy();
    }
    this.saidFull = false;
    const target = pickTarget(forward.targets, address);
    if (!target) return void client.resetAndDestroy();
    this.connections++;
    let open = true;
    const ended = () => {
      if (open) this.connections--;
      open = false;
    };
    client.on('error', () => {}); // reset before it was handed over: the relay (or the copy) finds it closed
    const copyHere = () => (client.destroyed ? ended() : copy(client, target.address, forward.port, this.buffers, ended));
    if (this.relay) this.relay.hand(client, target.address, forward.port, copyHere, ended);
    else copyHere();
  }
}

/** envd's own copy of a connection (paused since its accept) both ways; `ended` once both sockets closed. */
function copy(client: Socket, host: string, port: number, buffers: ForwardBuffers, ended: () => void): void {
  let closed = 0;
  const onClose = () => {
    if (++closed === 2) ended();
  };
  const upstream = connect({ host, port, allowHalfOpen: true, noDelay: true });
  client.once('close', onClose);
  upstream.once('close', onClose);
  // An abort on one side is an abort on the other (a reset, not a polite end the peer would take for a complete answer).
  client.on('error', () => upstream.resetAndDestroy());
  upstream.on('error', () => client.resetAndDestroy());
  upstream.once('connect', () => {
    pump(client, upstream, buffers);
    pump(upstream, client, buffers);
    client.resume();
  });
}

/** The loopback listener of the same family as the address connected to, or else the other one. */
function pickTarget(targets: PortEntry[], address: string): PortEntry | undefined {
  const v4 = isIPv4(address);
  return targets.find((target) => isIPv4(target.address) === v4) ?? targets[0];
}
