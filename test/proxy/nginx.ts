import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** nginx in front of one envd, configured the way the control plane forwards to a sandbox. */
export interface Nginx {
  /** The public base URL of the sandbox: `http://127.0.0.1:<port>/sandboxes/<id>`. */
  url: string;
  /** nginx's error log so far (why a request became a 502). */
  errorLog(): string;
  stop(): Promise<void>;
}

function findNginx(): string {
  for (const candidate of ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/bin/nginx']) if (existsSync(candidate)) return candidate;
  const which = spawnSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' });
  if (which.status === 0 && which.stdout.trim()) return which.stdout.trim();
  // Fail, never skip: this suite is how CI knows envd works behind a proxy.
  throw new Error('nginx is not installed: the proxy suite needs it (Debian: apt-get install nginx)');
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as import('node:net').AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * The control plane's forwarding, as nginx says it: strip `/sandboxes/<id>`,
 * HTTP/1.1 to envd with a keep-alive pool, no buffering either way (SSE events
 * and upload bytes pass as they come), read/send timeouts far longer than the
 * 15 s keep-alive comments, and no body size limit (envd enforces its own).
 */
export function nginxConfig(prefix: string, port: number, upstream: URL, sandboxId: string): string {
  return `
daemon off;
master_process off;
worker_processes 1;
pid ${prefix}/nginx.pid;
error_log ${prefix}/error.log info;
events { worker_connections 1024; }
http {
  access_log ${prefix}/access.log;
  client_body_temp_path ${prefix}/client_body;
  proxy_temp_path ${prefix}/proxy;
  fastcgi_temp_path ${prefix}/fastcgi;
  uwsgi_temp_path ${prefix}/uwsgi;
  scgi_temp_path ${prefix}/scgi;

  upstream envd {
    server ${upstream.host};
    keepalive 16;
    keepalive_timeout 60s;
  }

  server {
    listen 127.0.0.1:${port};
    client_max_body_size 0;
    client_body_timeout 3600s;
    send_timeout 3600s;

    location /sandboxes/${sandboxId}/ {
      proxy_pass http://envd/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Request-Id $request_id;
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 3600s;
      proxy_send_timeout 3600s;
    }
  }
}
`;
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Starts nginx in the foreground with its own prefix, config, pid and logs, on a free loopback port. */
export async function startNginx(upstream: string, sandboxId: string): Promise<Nginx> {
  const binary = findNginx();
  const prefix = mkdtempSync(join(tmpdir(), 'envd-nginx-'));
  const errorLog = () => (existsSync(`${prefix}/error.log`) ? readFileSync(`${prefix}/error.log`, 'utf8') : '');
  // The port is free when chosen and taken by nginx a moment later: try again if another process got it first.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    writeFileSync(`${prefix}/nginx.conf`, nginxConfig(prefix, port, new URL(upstream), sandboxId));
    const child: ChildProcess = spawn(binary, ['-p', prefix, '-c', `${prefix}/nginx.conf`, '-e', `${prefix}/error.log`], { stdio: ['ignore', 'inherit', 'inherit'] });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    let up = false;
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && child.exitCode === null; ) {
      if ((up = await listening(port))) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    if (up) {
      return {
        url: `http://127.0.0.1:${port}/sandboxes/${sandboxId}`,
        errorLog,
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          await exited;
          rmSync(prefix, { recursive: true, force: true });
        },
      };
    }
    child.kill('SIGKILL');
    await exited;
    if (attempt >= 3 || !/Address already in use/.test(errorLog())) {
      const log = errorLog();
      rmSync(prefix, { recursive: true, force: true });
      throw new Error(`nginx did not start:\n${log}`);
    }
  }
}
