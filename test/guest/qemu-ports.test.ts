// Servers in the guest (issue 39): a command runs busybox httpd on 127.0.0.1
// only, and the host reaches it at the guest's address, through envd's loopback
// forward; GET /ports and /ports/watch see it with the command that owns it.
// The busybox + musl image: nothing but a kernel, busybox and /etc/passwd.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEvents } from '../helpers/sse.js';
import { bootGuest, staticNetwork, type BootedGuest } from './boot.js';
import { run, type EnvdClient } from './client.js';
import { BUSYBOX_IMAGE_FILE } from './paths.js';
const HTTPD_PORT = 8080;

describe('ports and the loopback forward in a qemu VM (busybox + musl image)', () => {
  let guest: BootedGuest | undefined;
  let client: EnvdClient;

  beforeAll(async () => {
    // The host reaches the guest's own address (10.0.2.15) on 8080 through qemu's forward, as the traffic proxy would.
    guest = await bootGuest({ image: BUSYBOX_IMAGE_FILE, name: 'ports', append: staticNetwork('envd-ports'), extraPorts: [HTTPD_PORT] });
    client = guest.client;
  });

  afterAll(async () => {
    await guest?.stop();
  });

  it('a command serving on 127.0.0.1:8080 is reached from the host at the guest address; /ports names the command; the watch saw it open', async () => {
    // A CGI script that answers the peer address httpd saw: the client's own when the forward is steered in the kernel.
    // (CGI headers end in CRLF: busybox httpd passes them as they are, and fetch refuses a bare LF.)
    const peerScript = '#!/bin/sh\\nprintf "Content-Type: text/plain\\\\r\\\\n\\\\r\\\\n"\\necho $REMOTE_ADDR\\n';
    await run(client, `mkdir -p /tmp/www/cgi-bin && echo served-from-loopback > /tmp/www/index.html && printf '${peerScript}' > /tmp/www/cgi-bin/peer && chmod +x /tmp/www/cgi-bin/peer`, { user: 'root' });
    const abort = new AbortController();
    const events = readEvents(await client.call('GET', '/ports/watch', undefined, { signal: abort.signal }));
    expect((await events.next()).value?.event).toBe('ready');

    const started = Date.now();
    const { status, body } = await client.json('POST', '/commands', { cmd: `busybox httpd -f -p 127.0.0.1:${HTTPD_PORT} -h /tmp/www`, user: 'root', background: true });
    expect(status).toBe(200);
    for (;;) {
      const { value, done } = await events.next();
      if (done) throw new Error('the ports watch ended');
      if (value.event === 'open' && value.data.port === HTTPD_PORT) {
        expect(value.data).toMatchObject({ protocol: 'tcp', address: '127.0.0.1', command_pid: body.pid, user: 'root' });
        break;
      }
    }
    console.log(`ports: command start → open event ${Date.now() - started} ms (TCG)`);
    abort.abort();

    // The forward listens within a poll of the listen; TCG makes everything slower, so wait for it.
    const url = `${guest!.vm.extraUrls[HTTPD_PORT]}/index.html`;
    let text = '';
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      try {
        const response = await fetch(url, { signal: AbortSignal.timeout(5_000) });
        text = await response.text();
        if (response.status === 200) break;
      } catch {
        // not forwarded yet
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(text).toBe('served-from-loopback\n');
    console.log(`ports: command start → the host reached httpd at the guest address ${Date.now() - started} ms (TCG)`);

    // Steered by envd's sk_lookup program in the guest's 6.1 kernel: httpd saw qemu's host side (10.0.2.2), not a relay's 127.0.0.1,
    // and the relay child holds the BPF link.
    const peer = await (await fetch(`${guest!.vm.extraUrls[HTTPD_PORT]}/cgi-bin/peer`, { signal: AbortSignal.timeout(10_000) })).text();
    console.log(`ports: httpd saw the peer ${peer.trim()}`);
    expect(peer.trim()).toBe('10.0.2.2');
    expect((await run(client, 'ls -l /proc/*/fd 2>/dev/null | grep -c bpf_link', { user: 'root' })).stdout.trim()).toBe('1');

    const ports = (await client.json('GET', '/ports')).body.ports.filter((port: any) => port.port === HTTPD_PORT);
    // envd's own listener on 10.0.2.15:8080 is plumbing, not listed.
    expect(ports).toEqual([expect.objectContaining({ protocol: 'tcp', address: '127.0.0.1', command_pid: body.pid, cmd: expect.stringContaining('httpd') })]);

    // The loopback listener gone, the forward goes too.
    expect((await client.call('DELETE', `/commands/${body.pid}`)).status).toBe(200);
    const gone = Date.now() + 30_000;
    let refused = false;
    while (!refused && Date.now() < gone) {
      refused = await fetch(url, { signal: AbortSignal.timeout(5_000) }).then(
        () => false,
        () => true,
      );
      if (!refused) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(refused).toBe(true);
  });
});
