// Opening a POST /files/watch stream and waiting for its `ready` event.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { readSse, send } from './client.mjs';

/**
 * Opens a watch on `path` (`recursive` as in the request body); resolves once
 * it is armed with { close() }; `onChange(data)` is called for every change event.
 */
export async function openWatch(server, path, onChange = () => {}, { recursive } = {}) {
  const controller = new AbortController();
  const res = await send(server, 'POST', '/files/watch', { body: { path, recursive }, read: false, signal: controller.signal });
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

/** inotify watches a process holds: one `inotify wd:` line per watch in the fdinfo of its inotify fds. */
export function countInotifyWatches(pid) {
  let watches = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) !== 'anon_inode:inotify') continue;
      watches += readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8').split('\n').filter((line) => line.startsWith('inotify wd:')).length;
    } catch {
      // closed while we looked
    }
  }
  return watches;
}
