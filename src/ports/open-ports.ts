import type { ProcessRegistry } from '../commands/registry.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { commandOwnerOf } from './command-owner.js';
import { guestAddresses } from './forward-addresses.js';
import { ForwardRelay } from './forward-relay.js';
import { LoopbackForwarder, MAX_FORWARDED_CONNECTIONS } from './loopback-forward.js';
import { PortTable, type PortOwnerLookups } from './port-table.js';
import { socketWatcher } from './socket-watch.js';

export interface Ports {
  table: PortTable;
  forwarder: LoopbackForwarder;
}

/**
 * The port table, with owners looked up in the command registry, and the
 * loopback forward, on unless --forward-loopback off. `serviceOf` names the
 * service that runs a command (null: no services).
 */
export function openPorts(config: Config, processes: ProcessRegistry, log: Logger, serviceOf: PortOwnerLookups['serviceOf'] = () => null): Ports {
  const commands = {
    has: (pid: number) => processes.get(pid) !== undefined,
    pidOfId: (id: string) => processes.list().find((proc) => proc.id === id)?.pid,
  };
  const table = new PortTable({ commandOf: (pid) => commandOwnerOf(pid, commands), serviceOf });
  table.startSocketWatch = socketWatcher(processes.holderPath);
  table.onSocketWatchFailed = (reason) => log.warn({ reason }, 'sock_diag netlink unavailable: polling /proc/net for port changes');
  const fixed = config.forwardAddresses;
  const relay = new ForwardRelay(processes.holderPath, log, undefined, config.forwardSteering);
  const forwarder = new LoopbackForwarder(table, fixed ? () => [...fixed] : guestAddresses, log, MAX_FORWARDED_CONNECTIONS, relay);
  if (config.forwardLoopback) forwarder.enable(true);
  return { table, forwarder };
}
