import { existsSync, lstatSync, mkdirSync, realpathSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { checkIdentity, MAX_ENTROPY_BYTES, MIN_ENTROPY_BYTES, type IdentityFiles } from '../../src/lifecycle/identity.js';
import { withCertificates } from '../../src/lifecycle/trust-store.js';
import { startServer, type TestServer } from '../helpers/server.js';

// /init's entropy, hostname, machine_id and ca_bundle write the machine's
// identity: here every file is in the test's temporary directory and every
// system call (RNDADDENTROPY, sethostname) is recorded, never made. The real
// effect is proven in the guest suite (test/guest/qemu-snapshot.test.ts).

/** A throwaway self-signed CA (openssl req -x509, P-256): only its parsing matters. */
const CA = `-----BEGIN CERTIFICATE-----
MIIBhTCCASugAwIBAgIUc2utqDGD4qy7VdndAttYdaPWBsEwCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMZW52ZC10ZXN0LWNhMCAXDTI2MTEyNjA5MDAwN1oYDzIxMjYx
MTAyMDkwMDA3WjAXMRUwEwYDVQQDDAxlbnZkLXRlc3QtY2EwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAASA2We09/KPkx4HfAj0wUI60oTfSxPHAHui3Z7xChQGszC/
sziLl0pmv757/R3Fe+eRBC+RH0aEXdZzr9JbrpH4o1MwUTAdBgNVHQ4EFgQURCu9
Wt1yYE+mx3l8Ya1XMtOCsn0wHwYDVR0jBBgwFoAURCu9Wt1yYE+mx3l8Ya1XMtOC
sn0wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEAiTGbp9/x23ZN
i7AaQCichkEDd7BchIPcxDvaqCu7huwCIGXyCUzaIx6bXuarxK0k5PaVtFdFX9Q1
kvYWOGT2WSWo
-----END CERTIFICATE-----`;
const SYSTEM_STORE = '# the image\'s own certificates\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n';

const dir = mkdtempSync(join(tmpdir(), 'envd-identity-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let server: TestServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** An /etc of the given layout in a fresh directory. */
function etc(name: string, layout: 'debian' | 'alpine' | 'rhel' | 'busybox'): IdentityFiles & { root: string } {
  const root = join(dir, name);
  const path = (relative: string) => join(root, relative);
  mkdirSync(path('etc/ssl/certs'), { recursive: true });
  writeFileSync(path('etc/hostname'), 'image\n');
  writeFileSync(path('etc/machine-id'), `${'1'.repeat(32)}\n`, { mode: 0o444 });
  if (layout === 'debian' || layout === 'alpine') writeFileSync(path('etc/ssl/certs/ca-certificates.crt'), SYSTEM_STORE);
  if (layout === 'alpine') symlinkSync('certs/ca-certificates.crt', path('etc/ssl/cert.pem'));
  if (layout === 'rhel') {
    mkdirSync(path('etc/pki/tls/certs'), { recursive: true });
    mkdirSync(path('etc/pki/ca-trust/extracted/pem'), { recursive: true });
    writeFileSync(path('etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem'), SYSTEM_STORE);
    symlinkSync('../../ca-trust/extracted/pem/tls-ca-bundle.pem', path('etc/pki/tls/certs/ca-bundle.crt'));
  }
  return {
    root,
    hostname: path('etc/hostname'),
    machineId: path('etc/machine-id'),
    trustStores: ['etc/ssl/certs/ca-certificates.crt', 'etc/ssl/cert.pem', 'etc/pki/tls/certs/ca-bundle.crt'].map(path),
    newTrustStore: path('etc/ssl/certs/ca-certificates.crt'),
  };
}

async function start(files: IdentityFiles) {
  const calls: Array<{ args: string[]; stdin?: Buffer }> = [];
  const reseeded: Buffer[] = [];
  server = await startServer(
    {},
    {
      setClock: async () => {},
      machine: {
        identity: {
          files,
          job: async (args, stdin) => void calls.push({ args: [...args], ...(stdin ? { stdin: Buffer.from(stdin) } : {}) }),
          reseed: (bytes) => (reseeded.push(Buffer.from(bytes)), true),
        },
      },
    },
  );
  return { server, calls, reseeded };
}

const entropy = Buffer.alloc(MIN_ENTROPY_BYTES, 7);

describe("/init's identity fields", () => {
  it('credits entropy, reseeds envd, sets the host name and writes /etc/hostname and /etc/machine-id', async () => {
    const files = etc('all', 'debian');
    const { server, calls, reseeded } = await start(files);
    const id = 'ABCDEF0123456789abcdef0123456789';
    const answer = await server.call('POST', '/init', { entropy: entropy.toString('base64'), hostname: 'fork-2.sandbox', machine_id: id });
    expect(answer.status).toBe(204);
    expect(calls).toEqual([{ args: ['--add-entropy'], stdin: entropy }, { args: ['--set-hostname', 'fork-2.sandbox'] }]);
    expect(reseeded).toEqual([entropy]);
    expect(readFileSync(files.hostname, 'utf8')).toBe('fork-2.sandbox\n');
    expect(readFileSync(files.machineId, 'utf8')).toBe(`${id.toLowerCase()}\n`);
    // The image's mode is kept, and no temp file is left beside the targets.
    expect(lstatSync(files.machineId).mode & 0o777).toBe(0o444);
    expect(readdirSync(join(files.root, 'etc')).sort()).toEqual(['hostname', 'machine-id', 'ssl']);
  });

  for (const layout of ['debian', 'alpine', 'rhel'] as const) {
    it(`adds ca_bundle to the ${layout} trust store once, through its links, keeping the image's certificates`, async () => {
      const files = etc(layout, layout);
      const { server } = await start(files);
      for (let i = 0; i < 2; i++) expect((await server.call('POST', '/init', { ca_bundle: `comment\n${CA}\ntrailing` })).status).toBe(204);
      const existing = files.trustStores.filter((path) => existsSync(path));
      const stores = new Set(existing.map((path) => realpathSync(path)));
      expect(stores.size).toBe(1);
      const text = readFileSync([...stores][0]!, 'utf8');
      expect(text.startsWith(SYSTEM_STORE)).toBe(true);
      expect(text.split('BEGIN CERTIFICATE').length - 1).toBe(2);
      expect(text).toContain(CA);
      expect(text).not.toContain('trailing');
      // Links stay links, naming the store.
      const links = existing.filter((path) => lstatSync(path).isSymbolicLink());
      expect(links).toHaveLength(layout === 'debian' ? 0 : 1);
    });
  }

  it('makes a trust store where the image has none (busybox), and commands get SSL_CERT_FILE and its kin naming it', async () => {
    const files = etc('busybox', 'busybox');
    const { server } = await start(files);
    expect((await server.call('POST', '/init', { ca_bundle: CA, envs: { REQUESTS_CA_BUNDLE: '/mine.pem' } })).status).toBe(204);
    expect(readFileSync(files.newTrustStore, 'utf8')).toContain(CA);
    const run = await server.json('POST', '/commands', { cmd: 'sh', args: ['-c', 'echo "$SSL_CERT_FILE|$NODE_EXTRA_CA_CERTS|$REQUESTS_CA_BUNDLE"'] });
    // The sandbox envs /init sets win over envd's.
    expect(run.body.stdout).toBe(`${files.newTrustStore}|${files.newTrustStore}|/mine.pem\n`);
  });

  it('changes nothing, file or call, when one field of the body is bad (all or nothing)', async () => {
    const files = etc('atomic', 'debian');
    const { server, calls } = await start(files);
    const good = { entropy: entropy.toString('base64'), hostname: 'fine', envs: { A: '1' } };
    for (const bad of [{ machine_id: 'xyz' }, { ca_bundle: 'not a certificate' }, { default_workdir: '/no/such/dir' }]) {
      const answer = await server.json('POST', '/init', { ...good, ...bad });
      expect(answer.status, JSON.stringify(bad)).toBe(400);
      expect(answer.body.message).toContain(Object.keys(bad)[0]);
    }
    expect(calls).toEqual([]);
    expect(readFileSync(files.hostname, 'utf8')).toBe('image\n');
    expect(readFileSync(files.newTrustStore, 'utf8')).toBe(SYSTEM_STORE);
    expect((await server.json('GET', '/envs')).body).toEqual({});
  });
});

describe('checkIdentity', () => {
  const refused = (body: Record<string, string>) => {
    try {
      checkIdentity(body);
    } catch (error) {
      return (error as Error & { status: number }).status === 400 ? (error as Error).message : `status ${(error as { status: number }).status}`;
    }
    return 'accepted';
  };

  it('takes entropy of 32 to 4096 bytes in padded base64, and refuses anything else naming the field', () => {
    expect(refused({ entropy: Buffer.alloc(MIN_ENTROPY_BYTES).toString('base64') })).toBe('accepted');
    expect(refused({ entropy: Buffer.alloc(MAX_ENTROPY_BYTES).toString('base64') })).toBe('accepted');
    expect(refused({ entropy: Buffer.alloc(MIN_ENTROPY_BYTES - 1).toString('base64') })).toMatch(/^entropy: 31 bytes/);
    expect(refused({ entropy: Buffer.alloc(MAX_ENTROPY_BYTES + 1).toString('base64') })).toMatch(/^entropy: 4097 bytes/);
    expect(refused({ entropy: `${Buffer.alloc(33).toString('base64')}!` })).toMatch(/^entropy: not base64/);
    expect(refused({ entropy: Buffer.alloc(33, 0xff).toString('base64url') })).toMatch(/^entropy: not base64/);
  });

  it('takes RFC 1123 host names up to 64 characters', () => {
    for (const name of ['a', 'sandbox-1', 'fork.example.com', 'x'.repeat(63)]) expect(refused({ hostname: name }), name).toBe('accepted');
    for (const name of ['-a', 'a-', 'a..b', 'a b', 'a_b', 'ä', `${'x'.repeat(63)}.y`, 'x'.repeat(64), '.a', 'a/b']) expect(refused({ hostname: name }), name).toMatch(/^hostname:/);
  });

  it('takes a machine_id of 32 hex digits, not all zero', () => {
    expect(refused({ machine_id: 'f'.repeat(32) })).toBe('accepted');
    for (const id of ['0'.repeat(32), 'f'.repeat(31), 'g'.repeat(32), `${'f'.repeat(31)}\n`]) expect(refused({ machine_id: id }), id).toMatch(/^machine_id:/);
  });

  it('refuses a ca_bundle with no certificate or one that does not parse', () => {
    expect(refused({ ca_bundle: CA })).toBe('accepted');
    expect(refused({ ca_bundle: 'hello' })).toMatch(/^ca_bundle: no PEM certificate/);
    expect(refused({ ca_bundle: '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----' })).toMatch(/^ca_bundle: certificate 1 of 1 does not parse/);
  });
});

describe('withCertificates', () => {
  it('replaces the block an earlier /init added, and adds a newline to a store that lacks its last one', () => {
    const once = withCertificates('image-cert', 'A');
    expect(once).toBe('image-cert\n# envd /init ca_bundle: begin\nA\n# envd /init ca_bundle: end\n');
    expect(withCertificates(once, 'B')).toBe('image-cert\n# envd /init ca_bundle: begin\nB\n# envd /init ca_bundle: end\n');
    expect(withCertificates('', 'A')).toBe('# envd /init ca_bundle: begin\nA\n# envd /init ca_bundle: end\n');
  });
});
