import { existsSync, realpathSync, renameSync, rmSync } from 'node:fs';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import { badRequest } from '../errors.js';
import type { HolderJob } from '../snapshot/holder-jobs.js';
import { checkCaBundle, NEW_TRUST_STORE, TRUST_STORE_VARIABLES, TRUST_STORES, withCertificates } from './trust-store.js';

/** /init's `entropy`: at least this much (a 256-bit seed) … */
export const MIN_ENTROPY_BYTES = 32;
/** … and at most this (envd-holder --add-entropy's bound too). */
export const MAX_ENTROPY_BYTES = 4096;
/** HOST_NAME_MAX. */
export const MAX_HOSTNAME_LENGTH = 64;

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
/** RFC 1123 labels, dot-separated: what sethostname takes and every resolver and shell prompt handles. */
const HOSTNAME = /^(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*$/;
const MACHINE_ID = /^[0-9a-f]{32}$/;

/** The files /init's identity fields write; a test gives paths in its temporary directory, never the machine's own. */
export interface IdentityFiles {
  hostname: string;
  machineId: string;
  trustStores: readonly string[];
  newTrustStore: string;
}

export const SYSTEM_IDENTITY_FILES: IdentityFiles = { hostname: '/etc/hostname', machineId: '/etc/machine-id', trustStores: TRUST_STORES, newTrustStore: NEW_TRUST_STORE };

/** What makes one fork differ from its siblings, checked. */
export interface IdentityPlan {
  entropy?: Buffer;
  hostname?: string;
  machineId?: string;
  /** The certificates, checked, as PEM. */
  caBundle?: string;
}

export function checkIdentity(body: { entropy?: string; hostname?: string; machine_id?: string; ca_bundle?: string }): IdentityPlan {
  const plan: IdentityPlan = {};
  if (body.entropy !== undefined) {
    if (!BASE64.test(body.entropy)) throw badRequest('entropy: not base64 (RFC 4648, with padding)');
    const bytes = Buffer.from(body.entropy, 'base64');
    if (bytes.length < MIN_ENTROPY_BYTES || bytes.length > MAX_ENTROPY_BYTES) {
      throw badRequest(`entropy: ${bytes.length} bytes, must be ${MIN_ENTROPY_BYTES} to ${MAX_ENTROPY_BYTES}`);
    }
    plan.entropy = bytes;
  }
  if (body.hostname !== undefined) {
    if (body.hostname.length > MAX_HOSTNAME_LENGTH || !HOSTNAME.test(body.hostname)) {
      throw badRequest(`hostname: ${JSON.stringify(body.hostname)} is not a host name (letters, digits and "-" in dot-separated labels, at most ${MAX_HOSTNAME_LENGTH} characters)`);
    }
    plan.hostname = body.hostname;
  }
  if (body.machine_id !== undefined) {
    const id = body.machine_id.toLowerCase();
    if (!MACHINE_ID.test(id) || /^0+$/.test(id)) throw badRequest(`machine_id: ${JSON.stringify(body.machine_id)} is not 32 hex digits (and not all zero)`);
    plan.machineId = id;
  }
  if (body.ca_bundle !== undefined) plan.caBundle = checkCaBundle(body.ca_bundle);
  return plan;
}

/** Files written aside, renamed over their targets by commit(): until then nothing changed. */
export interface StagedIdentity {
  /** Renames every file into place (synchronous: no request sees half of them); returns the variables naming the trust store. */
  commit(): Record<string, string> | undefined;
  discard(): void;
}

/**
 * Writes each file of the plan beside its target (same directory, so the
 * rename is atomic), keeping the target's mode. A failure (read-only /etc,
 * a full disk) removes what was written and throws: nothing changed.
 */
export async function stageIdentity(plan: IdentityPlan, files: IdentityFiles): Promise<StagedIdentity> {
  const staged: Array<{ temp: string; target: string }> = [];
  const discard = () => {
    for (const { temp } of staged) rmSync(temp, { force: true });
    staged.length = 0;
  };
  let exported: string | undefined;
  try {
    if (plan.hostname !== undefined) staged.push(await writeAside(files.hostname, `${plan.hostname}\n`));
    if (plan.machineId !== undefined) staged.push(await writeAside(files.machineId, `${plan.machineId}\n`));
    if (plan.caBundle !== undefined) {
      const existing = files.trustStores.filter((path) => existsSync(path));
      exported = existing[0] ?? files.newTrustStore;
      // A link (Alpine's cert.pem, RHEL's ca-bundle.crt) is written through once, at the file it names.
      const targets = existing.length > 0 ? [...new Set(existing.map((path) => realpathSync(path)))] : [files.newTrustStore];
      for (const target of targets) {
        const current = existsSync(target) ? await readFile(target, 'utf8') : '';
        staged.push(await writeAside(target, withCertificates(current, plan.caBundle)));
      }
    }
  } catch (error) {
    discard();
    throw error;
  }
  return {
    commit() {
      for (const { temp, target } of staged) renameSync(temp, target);
      staged.length = 0;
      return exported === undefined ? undefined : Object.fromEntries(TRUST_STORE_VARIABLES.map((name) => [name, exported]));
    },
    discard,
  };
}

async function writeAside(target: string, text: string): Promise<{ temp: string; target: string }> {
  await mkdir(dirname(target), { recursive: true });
  const mode = await stat(target).then(
    (stats) => stats.mode & 0o7777,
    () => 0o644,
  );
  const temp = join(dirname(target), `.${basename(target)}.envd-${randomBytes(6).toString('hex')}.tmp`);
  await writeFile(temp, text, { mode, flag: 'wx' });
  return { temp, target };
}

/** What the identity fields write and call; injected so that tests never touch this machine's own. */
export interface IdentityMachine {
  files: IdentityFiles;
  /** envd-holder's --add-entropy and --set-hostname (src/snapshot/holder-jobs.ts). */
  job: HolderJob;
  /** Mixes bytes into envd's own generator and reseeds it (src/native/random-reseed.c). */
  reseed: (bytes: Uint8Array) => boolean;
}

/**
 * The system calls of a committed plan: entropy into the kernel's pool, then
 * into envd's own generator (which reseeds from the kernel, new entropy
 * included), and the kernel host name. Like the clock, a guest that cannot
 * (no CAP_SYS_ADMIN in a container) still initialises, with a warning.
 */
export async function callIdentity(plan: IdentityPlan, machine: IdentityMachine, log: FastifyBaseLogger): Promise<void> {
  if (plan.entropy !== undefined) {
    try {
      await machine.job(['--add-entropy'], plan.entropy);
    } catch (error) {
      log.warn({ err: error }, "cannot credit /init's entropy to the kernel (envd needs CAP_SYS_ADMIN); the kernel's random state may be a sibling fork's");
    }
    machine.reseed(plan.entropy);
  }
  if (plan.hostname !== undefined) {
    try {
      await machine.job(['--set-hostname', plan.hostname]);
    } catch (error) {
      log.warn({ err: error, hostname: plan.hostname }, 'cannot set the kernel host name (envd needs CAP_SYS_ADMIN); /etc/hostname has it');
    }
  }
}
