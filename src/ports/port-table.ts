import { readBoundSockets, type BoundSocket } from './proc-net.js';
import type { SocketWatch, StartSocketWatch } from './socket-watch.js';
import { commandLineOf, findSocketOwners, isAlive, UserNames } from './socket-owners.js';

/**
 * How often the sockets are read (netlink dump, or /proc/net as the fallback) while someone needs events (a watch, or the
 * loopback forward). An event then comes at most this long after the
 * listen() or close() plus a poll's own time, ~half of it at the median:
 * 40 ms meets "within 100 ms, p50 ≤ 50 ms" with room for a loaded guest.
 * Why polling and what it costs: docs/api.md, "Ports".
 */
export const POLL_INTERVAL_MS = 40;

/**
 * The most of one core polling may take: the wait after each poll stretches
 * so that the polls' own time stays under this share. /proc/net's cost grows
 * with the kernel's TCP hash, which is sized by memory: ~0.1 ms a poll in a
 * 512 MiB guest (40 ms, as above), 5 ms on a 24 GiB host (the wait stretches
 * to ~0.5 s there). Measured in bench/ports.mjs.
 */
export const POLL_CPU_SHARE = 0.01;
/**
 * Sockets envd keeps track of, at most (~0.5 KiB each). A sandbox user can
 * bind as many UDP sockets as file descriptors allow; past this the rest are
 * not listed (`truncated` in GET /ports) rather than taking envd's memory.
 */
export const MAX_TRACKED_SOCKETS = 4096;

/** The longest wait between two polls, however slow they are. */
export const MAX_POLL_INTERVAL_MS = 1_000;

/** One listening TCP socket or bound UDP socket, as GET /ports shows it. */
export interface PortEntry {
  port: number;
  protocol: 'tcp' | 'udp';
  address: string;
  pid: number | null;
  command_pid: number | null;
  service: string | null;
  cmd: string | null;
  user: string;
}

/**
 * Who owns a process, asked of the rest of envd: the tracked command whose
 * tree holds it (src/ports/command-owner.ts), and the service that runs that
 * command (null until services exist).
 */
export interface PortOwnerLookups {
  commandOf(pid: number): number | null;
  serviceOf(pid: number, commandPid: number | null): string | null;
}

export interface PortListener {
  onOpen(entry: PortEntry): void;
  onClose(entry: PortEntry): void;
}

interface Known {
  socket: BoundSocket;
  entry: PortEntry;
}

const keyOf = (socket: BoundSocket) => `${socket.protocol} ${socket.address} ${socket.port} ${socket.inode}`;

const order = (a: PortEntry, b: PortEntry) => a.protocol.localeCompare(b.protocol) || a.port - b.port || a.address.localeCompare(b.address);

/**
 * The guest's listening ports, and who is told when one opens or closes.
 * While at least one listener is subscribed, the netlink watch reports every
 * change (or, without it, /proc/net is polled every POLL_INTERVAL_MS); never
 * otherwise: GET /ports reads /proc/net itself. A socket is
 * known by its inode, so one closed and opened again at the same address
 * between two polls is a close and an open.
 */
export class PortTable {
  private known = new Map<string, Known>();
  private readonly listeners = new Set<PortListener>();
  private timer: NodeJS.Timeout | undefined;
  /** What reading /proc/net takes, smoothed (ms). */
  private pollMs = 0;
  private readonly users = new UserNames();
  /** Whether the last read found more sockets than MAX_TRACKED_SOCKETS (the rest are not known). */
  truncated = false;
  /** Sockets envd keeps out of what clients see (its own forwarding listeners). */
  isHidden: (entry: PortEntry) => boolean = () => false;
  /**
   * The netlink watch used instead of polling /proc/net while anyone is
   * subscribed (src/ports/socket-watch.ts); unset, or once it failed: polling.
   */
  startSocketWatch: StartSocketWatch | undefined;
  /** Told once, when the netlink watch fails and polling takes over. */
  onSocketWatchFailed: (reason: string) => void = () => {};
  private socketWatch: SocketWatch | undefined;

  constructor(
    private readonly lookups: PortOwnerLookups,
    private readonly readSockets: (limit: number) => BoundSocket[] = readBoundSockets,
    private readonly intervalMs = POLL_INTERVAL_MS,
    /** The clock a read is timed with (a test's own makes reads as slow as it says). */
    private readonly now: () => number = () => performance.now(),
    private readonly maxSockets = MAX_TRACKED_SOCKETS,
  ) {}

  /** Whether changes are being looked for now (by the netlink watch or by polling /proc/net). */
  get polling(): boolean {
    return this.timer !== undefined || this.socketWatch !== undefined;
  }

  /** Every port now, read afresh, sorted by protocol, port and address; owners that exited are looked up again. */
  list(): PortEntry[] {
    this.refresh();
    const orphans = [...this.known.values()].filter(({ entry }) => entry.pid !== null && !isAlive(entry.pid));
    if (orphans.length > 0) {
      const owners = findSocketOwners(new Set(orphans.map(({ socket }) => socket.inode)));
      for (const known of orphans) known.entry = this.describe(known.socket, owners.get(known.socket.inode));
    }
    return this.visible();
  }

  /** What a client sees: every known port but envd's own forwarding listeners. */
  visible(): PortEntry[] {
    return [...this.known.values()].map(({ entry }) => entry).filter((entry) => !this.isHidden(entry)).sort(order);
  }

  /** Every known entry, hidden ones too (the forward needs to see what holds an address). */
  entries(): PortEntry[] {
    return [...this.known.values()].map(({ entry }) => entry);
  }

  /** The socket inode of a known entry (the forward's steering names the listener by it). */
  inodeOf(entry: PortEntry): number | undefined {
    for (const known of this.known.values()) if (known.entry === entry) return known.socket.inode;
    return undefined;
  }

  /**
   * Tells `listener` of every open and close from now on; polling runs while
   * anyone is subscribed. The table is read first, so what the caller lists
   * right after subscribing is current. Returns the unsubscribe function (safe to call twice).
   */
  subscribe(listener: PortListener): () => void {
    this.refresh();
    this.listeners.add(listener);
    if (!this.polling) this.watch();
    return () => {
      if (!this.listeners.delete(listener) || this.listeners.size > 0) return;
      clearTimeout(this.timer);
      this.timer = undefined;
      this.socketWatch?.stop();
      this.socketWatch = undefined;
    };
  }

  /** Starts the netlink watch, or polling where there is none. */
  private watch(): void {
    const start = this.startSocketWatch;
    if (!start) return this.schedule();
    this.socketWatch = start(this.intervalMs, this.maxSockets + 1, {
      onSet: (sockets) => this.apply(sockets),
      onFail: (reason) => {
        // For good: a kernel without sock_diag will not grow one. Polling goes on for whoever still listens.
        this.startSocketWatch = undefined;
        this.socketWatch = undefined;
        this.onSocketWatchFailed(reason);
        if (this.listeners.size > 0) this.schedule();
      },
    });
  }

  /** The wait before the next poll: the interval, or longer where polls are slow enough to pass POLL_CPU_SHARE. */
  get nextIntervalMs(): number {
    return Math.min(MAX_POLL_INTERVAL_MS, Math.max(this.intervalMs, this.pollMs / POLL_CPU_SHARE));
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.refresh();
      // Unsubscribed by a listener meanwhile: no next poll.
      if (this.timer) this.schedule();
    }, this.nextIntervalMs).unref();
  }

  /** Reads /proc/net once and tells the listeners what changed since the last read. */
  refresh(): void {
    const started = this.now();
    // One more than kept: whether there were more is known without reading them all.
    const sockets = this.readSockets(this.maxSockets + 1);
    // The steady cost of a poll; owners are looked up only when sockets open, a cost of the event, not of the waiting.
    const took = this.now() - started;
    this.pollMs = this.pollMs === 0 ? took : this.pollMs * 0.8 + took * 0.2;
    this.apply(sockets);
  }

  /** Takes `sockets` (at most one more than kept) as every socket now, and tells the listeners what changed. */
  private apply(sockets: BoundSocket[]): void {
    this.truncated = sockets.length > this.maxSockets;
    if (this.truncated) sockets.length = this.maxSockets;
    const next = new Map<string, Known>();
    const fresh: BoundSocket[] = [];
    for (const socket of sockets) {
      const key = keyOf(socket);
      const known = this.known.get(key);
      if (known) next.set(key, known);
      else if (!next.has(key)) fresh.push(socket);
    }
    const closed = [...this.known.entries()].filter(([key]) => !next.has(key)).map(([, known]) => known.entry);
    // The one expensive step, only for sockets never seen before.
    const owners = fresh.length > 0 ? findSocketOwners(new Set(fresh.map((socket) => socket.inode))) : undefined;
    const opened: PortEntry[] = [];
    for (const socket of fresh) {
      const entry = this.describe(socket, owners?.get(socket.inode));
      next.set(keyOf(socket), { socket, entry });
      opened.push(entry);
    }
    this.known = next;
    for (const entry of closed) for (const listener of this.listeners) listener.onClose(entry);
    for (const entry of opened) for (const listener of this.listeners) listener.onOpen(entry);
  }

  private describe(socket: BoundSocket, pid: number | undefined): PortEntry {
    const commandPid = pid === undefined ? null : this.lookups.commandOf(pid);
    return {
      port: socket.port,
      protocol: socket.protocol,
      address: socket.address,
      pid: pid ?? null,
      command_pid: commandPid,
      service: pid === undefined ? null : this.lookups.serviceOf(pid, commandPid),
      cmd: pid === undefined ? null : commandLineOf(pid),
      user: this.users.nameOf(socket.uid),
    };
  }
}
