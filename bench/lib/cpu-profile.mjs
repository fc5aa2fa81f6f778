// Reads a V8 .cpuprofile (node --cpu-prof) and lists where the time went:
// self time by function, and inclusive time by function, heaviest first.
import { readFileSync } from 'node:fs';

const where = (frame) => `${frame.functionName || '(anonymous)'} ${frame.url.split('/').slice(-2).join('/')}:${frame.lineNumber + 1}:${frame.columnNumber + 1}`;

export function summariseProfile(file, top = 25) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const parents = new Map();
  for (const n of profile.nodes) for (const child of n.children ?? []) parents.set(child, n.id);
  const timeOf = new Map();
  profile.samples.forEach((id, i) => timeOf.set(id, (timeOf.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));

  const self = new Map();
  const inclusive = new Map();
  let total = 0;
  for (const [id, us] of timeOf) {
    total += us;
    const key = where(nodes.get(id).callFrame);
    self.set(key, (self.get(key) ?? 0) + us);
    const seen = new Set();
    for (let cur = id; cur !== undefined; cur = parents.get(cur)) {
      const k = where(nodes.get(cur).callFrame);
      if (seen.has(k)) continue;
      seen.add(k);
      inclusive.set(k, (inclusive.get(k) ?? 0) + us);
    }
  }
  const list = (map) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, us]) => `${(us / 1000).toFixed(1).padStart(9)} ms  ${k}`)
      .join('\n');
  return `profile ${file}: ${(total / 1000).toFixed(0)} ms sampled\n--- self time\n${list(self)}\n--- inclusive time\n${list(inclusive)}`;
}
