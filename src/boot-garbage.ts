/** Long enough for the boot's own work (first /health polls, /init) to pass. */
const AFTER_LISTEN_MS = 250;

/**
 * One full garbage collection shortly after `node dist/envd.js` listens:
 * compiling the 0.85 MB bundle leaves ~4 MiB of garbage that V8's memory
 * reducer would only collect several seconds later, and a snapshot of the VM
 * taken meanwhile would carry it. The single executable starts from its code
 * cache and has little such garbage: there the collection itself cost
 * +1.6 MiB (measured), so it is skipped. `gc` comes from a throw-away context
 * with --expose-gc on only for that moment, so no global `gc` appears. The
 * modules are loaded only here (getBuiltinModule), not at start.
 */
export function collectBootGarbageSoon(): void {
  if (process.getBuiltinModule('node:sea').isSea()) return;
  setTimeout(() => {
    const v8 = process.getBuiltinModule('node:v8');
    v8.setFlagsFromString('--expose-gc');
    const gc = process.getBuiltinModule('node:vm').runInNewContext('gc') as () => void;
    v8.setFlagsFromString('--no-expose-gc');
    gc();
  }, AFTER_LISTEN_MS).unref();
}
