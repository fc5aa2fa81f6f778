import { isIPv4 } from 'node:net';
import type { ForwardRelay } from './forward-relay.js';
import type { PortEntry } from './port-table.js';
import { socketFdOf } from './socket-owners.js';

/**
 * Which loopback listener each forward address:port is steered to in the
 * kernel (src/holder/steer.h): a TCP connection there goes straight into the
 * user's listener, with no relay and its real peer address. Only an
 * address:port where envd's own listener is up is steered (its bind keeps
 * every other program off that address:port, and it takes the connections
 * whenever steering does not: before it starts, after a failure, in a kernel
 * without BPF). A listener is steered to addresses of its own family only (a
 * ::1 listener takes IPv6 connections, 127.0.0.1 IPv4 ones); the other case is
 * relayed.
 */
export class ForwardSteering {
  /** `address port` → the listener it is steered to (or asked to be). */
  private readonly steered = new Map<string, PortEntry>();
  /** Those the relay said it steers. */
  private readonly confirmed = new Set<PortEntry>();

  constructor(
    private readonly relay: ForwardRelay | undefined,
    /** The socket inode of a listener the port table knows. */
    private readonly inodeOf: (entry: PortEntry) => number | undefined,
  ) {}

  /** Steers `address`:`port` to the listener of its family among `targets`, or stops steering it if there is none. */
  update(address: string, port: number, targets: readonly PortEntry[]): void {
    const key = `${address} ${port}`;
    const current = this.steered.get(key);
    const wanted = pickListener(targets, address);
    if (current === wanted) return;
    if (current) {
      this.steered.delete(key);
      this.confirmed.delete(current);
      this.relay?.unsteer(address, port);
    }
    if (wanted) this.steer(key, address, port, wanted);
  }

  /** Stops steering `address`:`port` (envd's listener there is closing). */
  stop(address: string, port: number): void {
    this.update(address, port, []);
  }

  /** Whether the relay said `address`:`port` is steered now. */
  isSteered(address: string, port: number): boolean {
    const target = this.steered.get(`${address} ${port}`);
    return target !== undefined && this.confirmed.has(target);
  }

  private steer(key: string, address: string, port: number, target: PortEntry): void {
    if (!this.relay?.steering) return;
    const inode = this.inodeOf(target);
    const fd = target.pid === null || inode === undefined ? undefined : socketFdOf(target.pid, inode);
    if (fd === undefined) return;
    this.steered.set(key, target);
    this.relay.steer(target.pid!, fd, inode!, address, port, (steered) => {
      if (this.steered.get(key) !== target) return; // unsteered meanwhile
      if (steered) this.confirmed.add(target);
      // Not steered: relayed, and asked again only when another listener opens on the port.
      else this.steered.delete(key);
    });
  }
}

/** The listener of the address's family (targets are 127.0.0.1 and ::1 only: loopback-forward.ts). */
function pickListener(targets: readonly PortEntry[], address: string): PortEntry | undefined {
  return targets.find((target) => isIPv4(target.address) === isIPv4(address));
}
