import { randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, ftruncateSync, mkdirSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import { chmod, mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { HttpError } from '../errors.js';
import { readIfExists } from './meta.js';

/** Slots in the usage table: at most this many commands can be tracked at once. */
export const USAGE_SLOTS = 4096;
const SLOT_BYTES = 16;

/**
 * envd's two places outside its heap: the state directory (tmpfs: command
 * records, holder sockets and the memory tier of kept output) and the spool
 * (disk: kept output past the memory budget).
 *
 * The usage table is how the holders share one memory budget and one spool
 * budget without talking to envd: each command owns a slot of two u64 (bytes
 * it keeps in memory, bytes it keeps in the spool) that only its holder
 * writes; a holder sums every slot before it decides where a chunk goes.
 * envd only hands slots out and zeroes a slot once the command's files are
 * gone and its holder has exited.
 */
export class StateDir {
  readonly commandsDir: string;
  readonly usagePath: string;
  private readonly usageFd: number;
  /** Released slots, reused first; then the ones never handed out since start, from `nextFresh` up. */
  private readonly freeSlots: number[] = [];
  private nextFresh = 0;
  private readonly usedSlots = new Set<number>();
  private closed = false;
  /** Where usage() reads the table (64 KiB), once per /metrics call. */
  private readonly usageTable = Buffer.allocUnsafeSlow(USAGE_SLOTS * SLOT_BYTES);
  /** The same bytes as little-endian u32 words (x86-64 and arm64 are little-endian). */
  private readonly usageWords = new Uint32Array(this.usageTable.buffer, this.usageTable.byteOffset, this.usageTable.length / 4);

  private constructor(
    readonly root: string,
    readonly spoolDir: string,
  ) {
    this.commandsDir = join(root, 'cmds');
    this.usagePath = join(root, 'usage');
    // Read-write and created if missing, without O_APPEND (which would make positioned writes append).
    this.usageFd = openSync(this.usagePath, constants.O_RDWR | constants.O_CREAT, 0o600);
    if (fstatSync(this.usageFd).size !== USAGE_SLOTS * SLOT_BYTES) ftruncateSync(this.usageFd, USAGE_SLOTS * SLOT_BYTES);
  }

  /** Creates the directories (0700: kept output holds secrets) and the usage table. */
  static async open(root: string, spoolDir: string): Promise<StateDir> {
    for (const dir of [root, join(root, 'cmds'), spoolDir]) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await chmod(dir, 0o700);
    }
    return new StateDir(root, spoolDir);
  }

  /**
   * Marks the slots of re-adopted commands as taken and zeroes every other one
   * (left by commands that are gone), one write per run of free slots. No loop
   * over all 4096 slots: at start it made V8 compile it with TurboFan, and
   * mapping in the optimising compilers' code cost envd ~4 MiB of idle RSS.
   */
  claimSlots(taken: Iterable<number>): void {
    this.usedSlots.clear();
    for (const slot of taken) if (Number.isInteger(slot) && slot >= 0 && slot < USAGE_SLOTS) this.usedSlots.add(slot);
    this.freeSlots.length = 0;
    this.nextFresh = 0;
    let from = 0;
    for (const slot of [...this.usedSlots, USAGE_SLOTS].sort((a, b) => a - b)) {
      if (slot > from) this.zeroSlots(from, slot);
      from = slot + 1;
    }
  }

  /**
   * Marks one more slot as taken: a command re-adopted after the others
   * (claimSlots). Its slot may have been handed out meanwhile if its record
   * could not be read at first; then two commands share it, and only the
   * budgets' count is off until one of them is gone.
   */
  claimSlot(slot: number): void {
    if (!Number.isInteger(slot) || slot < 0 || slot >= USAGE_SLOTS) return;
    this.usedSlots.add(slot);
    const free = this.freeSlots.indexOf(slot);
    if (free >= 0) this.freeSlots.splice(free, 1);
  }

  takeSlot(): number {
    let slot = this.freeSlots.pop();
    while (slot === undefined && this.nextFresh < USAGE_SLOTS) {
      const fresh = this.nextFresh++;
      if (!this.usedSlots.has(fresh)) slot = fresh;
    }
    if (slot === undefined) throw new HttpError(503, `envd tracks ${USAGE_SLOTS} commands already; wait for or kill some and retry`);
    this.usedSlots.add(slot);
    return slot;
  }

  /** Called once the command's files are removed and its holder is gone: nothing can write the slot any more. */
  releaseSlot(slot: number): void {
    if (!this.usedSlots.delete(slot)) return;
    this.zeroSlots(slot, slot + 1);
    this.freeSlots.push(slot);
  }

  /** Bytes of kept output in memory and in the spool of the command in one slot. */
  slotUsage(slot: number): { memory: number; spool: number } {
    if (this.closed) return { memory: 0, spool: 0 };
    const bytes = Buffer.alloc(SLOT_BYTES);
    readSync(this.usageFd, bytes, 0, SLOT_BYTES, slot * SLOT_BYTES);
    return { memory: Number(bytes.readBigUInt64LE(0)), spool: Number(bytes.readBigUInt64LE(8)) };
  }

  /** Bytes of kept output in memory and in the spool, over all commands. */
  usage(): { memory: number; spool: number } {
    if (this.closed) return { memory: 0, spool: 0 };
    const table = this.usageTable;
    readSync(this.usageFd, table, 0, table.length, 0);
    // Each u64 as two u32 halves in plain numbers (exact below 2^53 bytes): BigInt reads of
    // 8,192 fields cost more than the rest of a command's start (bench/profile.mjs exec-throughput).
    const words = this.usageWords;
    let memory = 0;
    let spool = 0;
    for (let i = 0; i < words.length; i += SLOT_BYTES / 4) {
      memory += words[i]! + words[i + 1]! * 2 ** 32;
      spool += words[i + 2]! + words[i + 3]! * 2 ** 32;
    }
    return { memory, spool };
  }

  async createCommandDir(): Promise<{ id: string; dir: string }> {
    const id = randomBytes(8).toString('hex');
    const dir = join(this.commandsDir, id);
    // At once, as the record files are written (see readIfExists): the state dir is tmpfs.
    mkdirSync(dir, { mode: 0o700 });
    return { id, dir };
  }

  commandDir(id: string): string {
    return join(this.commandsDir, id);
  }

  /** The ids of the command directories. A failure to list them (EMFILE) is thrown: no list must never mean no commands. */
  async listCommandIds(): Promise<string[]> {
    const names = await readdir(this.commandsDir).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return [];
      throw error;
    });
    return names.filter((name) => /^[0-9a-f]{16}$/.test(name));
  }

  /**
   * Removes a command's record and every segment of its kept output, in both
   * tiers: the spool segments are the ones its holder listed (not a listing of
   * the whole spool, which a storm of kills would repeat for every command).
   */
  async removeCommand(id: string): Promise<void> {
    const dir = this.commandDir(id);
    // Unreadable (EMFILE) counts as none listed: the spool files left are removed at the next start.
    let listed = '';
    try {
      listed = readIfExists(join(dir, 'segments')) ?? '';
    } catch {}
    for (const path of listed.split('\n')) {
      if (path.startsWith(`${this.spoolDir}/${id}.`)) await rm(path, { force: true });
    }
    // The record's few files in tmpfs, at once: rm's promise walks them one thread-pool trip at a time.
    rmSync(dir, { recursive: true, force: true });
  }

  /** Removes spool files of commands nobody tracks any more (a crash between a command's end and its cleanup). */
  async sweepSpool(tracked: ReadonlySet<string>): Promise<number> {
    let removed = 0;
    for (const name of await readdir(this.spoolDir).catch(() => [] as string[])) {
      if (tracked.has(name.split('.')[0]!)) continue;
      await rm(join(this.spoolDir, name), { recursive: true, force: true });
      removed++;
    }
    return removed;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.usageFd);
  }

  /** Zeroes slots [from, to). */
  private zeroSlots(from: number, to: number): void {
    // After close (envd stopping), a late release has nothing left to update: the next envd zeroes unclaimed slots.
    if (this.closed) return;
    const bytes = (to - from) * SLOT_BYTES;
    writeSync(this.usageFd, Buffer.alloc(bytes), 0, bytes, from * SLOT_BYTES);
  }
}
