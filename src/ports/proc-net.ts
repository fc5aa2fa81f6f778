import { closeSync, openSync, readSync } from 'node:fs';
import { SocketAddress } from 'node:net';
import { endianness } from 'node:os';

/** A listening TCP socket or a bound (unconnected) UDP socket, as the kernel lists it. */
export interface BoundSocket {
  protocol: 'tcp' | 'udp';
  /** The local address as text: `127.0.0.1`, `0.0.0.0`, `::1`, `::`. */
  address: string;
  port: number;
  /** The socket's inode: what /proc/PID/fd links to as `socket:[INODE]`. */
  inode: number;
  /** The uid that created the socket. */
  uid: number;
}

/** The kernel's state numbers (include/net/tcp_states.h): a TCP listener, and a UDP socket that is bound but not connected. */
const TCP_LISTEN = '0A';
const UDP_UNCONNECTED = '07';

/**
 * The tables read, in this order. Listening TCP sockets come first in their
 * table (the kernel walks its listening hash before the established one), so
 * a TCP read stops at the first other row: the walk over every connection,
 * the expensive part on a machine with a large established hash, is skipped
 * as far as the kernel's page-sized reads allow.
 */
const TABLES = [
  { path: '/proc/net/tcp', protocol: 'tcp', wanted: TCP_LISTEN, stopAtOther: true },
  { path: '/proc/net/tcp6', protocol: 'tcp', wanted: TCP_LISTEN, stopAtOther: true },
  { path: '/proc/net/udp', protocol: 'udp', wanted: UDP_UNCONNECTED, stopAtOther: false },
  { path: '/proc/net/udp6', protocol: 'udp', wanted: UDP_UNCONNECTED, stopAtOther: false },
] as const;

/** One page: what the kernel's seq_file produces per read anyway. */
const READ_BYTES = 4096;
const buffer = Buffer.allocUnsafe(READ_BYTES);
const LITTLE_ENDIAN = endianness() === 'LE';

/**
 * Every listening TCP socket and bound UDP socket of envd's network
 * namespace, read synchronously from /proc/net (a few tens of microseconds
 * in a small VM): a poll must not wait behind file work in the thread pool.
 * A table that cannot be read (no IPv6 in the kernel) counts as empty.
 * At most `limit` sockets, in the tables' order (TCP first).
 */
export function readBoundSockets(limit = Infinity): BoundSocket[] {
  const found: BoundSocket[] = [];
  for (const table of TABLES) if (found.length < limit) readTable(table, found, limit);
  return found;
}

/** Rows past `limit` are not read: a guest with a hundred thousand sockets costs no more than the limit's worth. */
function readTable(table: (typeof TABLES)[number], found: BoundSocket[], limit: number): void {
  let fd: number;
  try {
    fd = openSync(table.path, 'r');
  } catch {
    return;
  }
  try {
    let pending = '';
    let header = true;
    for (;;) {
      const n = readSync(fd, buffer, 0, READ_BYTES, null);
      if (n === 0) break;
      pending += buffer.toString('latin1', 0, n);
      let start = 0;
      let newline: number;
      while ((newline = pending.indexOf('\n', start)) !== -1) {
        const line = pending.slice(start, newline);
        start = newline + 1;
        if (header) {
          header = false;
          continue;
        }
        const row = parseRow(line, table.protocol, table.wanted);
        if (row === 'other') {
          if (table.stopAtOther) return;
        } else if (row) {
          found.push(row);
          if (found.length >= limit) return;
        }
      }
      pending = pending.slice(start);
    }
  } catch {
    // A table that fails half-way is what it was up to there: the next poll reads it again.
  } finally {
    closeSync(fd);
  }
}

/** One row: `sl local remote st tx:rx tr:when retrnsmt uid timeout inode ...`. */
function parseRow(line: string, protocol: 'tcp' | 'udp', wanted: string): BoundSocket | 'other' | undefined {
  const fields = line.trim().split(/\s+/);
  if (fields.length < 10) return undefined;
  if (fields[3] !== wanted) return 'other';
  const local = fields[1]!;
  const colon = local.indexOf(':');
  const port = parseInt(local.slice(colon + 1), 16);
  // A UDP socket with port 0 is only created, not bound.
  if (port === 0) return undefined;
  const address = decodeAddress(local.slice(0, colon));
  if (address === undefined) return undefined;
  return { protocol, address, port, uid: Number(fields[7]), inode: Number(fields[9]) };
}

/** The kernel prints each 32-bit word of the address in host byte order. */
export function decodeAddress(hex: string): string | undefined {
  if (hex.length !== 8 && hex.length !== 32) return undefined;
  const bytes = Buffer.from(hex, 'hex');
  if (LITTLE_ENDIAN) for (let word = 0; word < bytes.length; word += 4) bytes.subarray(word, word + 4).reverse();
  if (bytes.length === 4) return bytes.join('.');
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i).toString(16));
  // SocketAddress spells it as inet_ntop does (`::1`, `::ffff:127.0.0.1`), as ss shows it.
  return new SocketAddress({ address: groups.join(':'), family: 'ipv6' }).address;
}

/** The loopback addresses whose servers the forward makes reachable: 127.0.0.1, ::1, and 127.0.0.1 mapped into IPv6. */
export function isForwardedLoopback(address: string): boolean {
  return address === '127.0.0.1' || address === '::1' || address === '::ffff:127.0.0.1';
}

/** 127.0.0.0/8, ::1, and IPv4 loopback mapped into IPv6. */
export function isLoopback(address: string): boolean {
  return address.startsWith('127.') || address === '::1' || address.startsWith('::ffff:127.');
}

/** 0.0.0.0 or :: (which also takes IPv4 unless the socket is IPV6_V6ONLY). */
export function isWildcard(address: string): boolean {
  return address === '0.0.0.0' || address === '::';
}
