import type { PortInfo } from '../client/index.js';
import { help, parse, type Verb } from './args.js';

/** One port as a line: what `ss -ltnup` users read first (protocol, address:port), then who holds it. */
function line(port: PortInfo): string {
  const address = port.address.includes(':') ? `[${port.address}]` : port.address;
  const owner = port.service ? `service ${port.service}` : port.command_pid !== null ? `command ${port.command_pid}` : '-';
  return `${port.protocol}\t${address}:${port.port}\t${port.pid ?? '-'}\t${owner}\t${port.user}\t${port.cmd ?? ''}\n`;
}

const HEADER = 'PROTO\tADDRESS\tPID\tOWNER\tUSER\tCMD\n';

/**
 * `envd ports`: the guest's listening ports, one a line; `-w` then follows
 * opens and closes (`+` and `-` before the line) until interrupted. --json
 * prints the answer, or each event as a line.
 */
const ports: Verb = async (argv, common) => {
  const { values, positionals } = parse('ports', argv, { watch: { type: 'boolean', short: 'w' } });
  if (values.help || positionals.length > 0) return help('ports', common, !values.help);
  if (!values.watch) {
    const list = await common.client.ports.list();
    if (common.json) common.out(`${JSON.stringify(list)}\n`);
    else {
      common.out(HEADER);
      for (const port of list) common.out(line(port));
    }
    return 0;
  }
  for await (const event of common.client.ports.watch()) {
    if (common.json) common.out(`${JSON.stringify(event)}\n`);
    else if (event.event === 'ready') {
      common.out(HEADER);
      for (const port of event.data.ports) common.out(`  ${line(port)}`);
    } else if (event.event === 'open') common.out(`+ ${line(event.data)}`);
    else if (event.event === 'close') common.out(`- ${line(event.data)}`);
    else if (event.event === 'error') throw new Error(event.data.message);
  }
  return 0;
};

export const portVerbs: Record<string, Verb> = { ports };
