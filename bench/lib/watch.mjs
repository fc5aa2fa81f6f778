// Opening a POST /files/watch stream and waiting for its `ready` event.
import { readSse, send } from './client.mjs';

/**
 * Opens a watch on `path`; resolves once it is armed with { close(), events }
 * where `onChange(data)` is called for every change event.
 */
export async function openWatch(server, path, onChange = () => {}) {
  const controller = new AbortController();
  const res = await send(server, 'POST', '/files/watch', { body: { path }, read: false, signal: controller.signal });
  if (res.statusCode !== 200) throw new Error(`POST /files/watch answered ${res.statusCode}`);
  let armed;
  const ready = new Promise((resolve) => (armed = resolve));
  const ended = readSse(res, (event, data) => {
    if (event === 'ready') armed();
    else if (event === 'change') onChange(JSON.parse(data));
  }).catch(() => {});
  await Promise.race([ready, ended.then(() => Promise.reject(new Error('watch stream ended before ready')))]);
  return {
    async close() {
      controller.abort();
      res.destroy();
      await ended;
    },
  };
}
