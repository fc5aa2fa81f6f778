// A stream client that stops reading: what the output-storm and recovery figures load envd with.
import { request } from 'node:http';

/** POSTs /commands/stream for `cmd` as `user`, reads the response headers, then never reads again. */
export function stalledStream(envd, cmd, user) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ cmd, user });
    const req = request(
      { host: '127.0.0.1', port: envd.port, method: 'POST', path: '/commands/stream', agent: false, headers: { authorization: `Bearer ${envd.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        res.pause();
        resolve({ close: () => req.destroy() });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
