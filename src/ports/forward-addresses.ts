import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { isLoopback } from './proc-net.js';

/**
 * The guest's own addresses a loopback listener is made reachable on: every
 * address of every interface but loopback ones, read when a port opens (so an
 * address configured after envd started is used for the ports that open
 * after it). IPv6 link-local addresses (fe80::/10) are left out: they need a
 * zone to bind and the traffic proxy never uses them.
 */
export function guestAddresses(): string[] {
  const found: string[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const { address, internal } of list ?? []) {
      if (internal || isLoopback(address) || /^fe[89ab][0-9a-f]:/i.test(address)) continue;
      if (!found.includes(address)) found.push(address);
    }
  }
  return found;
}

/** Checks --forward-address values: IP addresses, no wildcard. Returns the problems. */
export function checkForwardAddresses(addresses: readonly string[]): string[] {
  return addresses
    .filter((address) => isIP(address) === 0 || address === '0.0.0.0' || address === '::')
    .map((address) => `--forward-address (ENVD_FORWARD_ADDRESS) must be an IPv4 or IPv6 address of the guest (not a wildcard), got ${JSON.stringify(address)}`);
}
