import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startServer, type TestServer } from '../helpers/server.js';

const run = promisify(execFile);
let server: TestServer;
let project: string;

beforeAll(async () => {
  server = await startServer();
  // Another TS project with envd in its node_modules, importing it as a consumer would: 'envd/client'.
  project = mkdtempSync(join(tmpdir(), 'envd-consumer-'));
  mkdirSync(join(project, 'node_modules'));
  symlinkSync(resolve('.'), join(project, 'node_modules', 'envd'));
  writeFileSync(join(project, 'package.json'), JSON.stringify({ type: 'module' }));
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify({ compilerOptions: { target: 'ES2024', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, skipLibCheck: true, outDir: 'out', types: ['node'], typeRoots: [resolve('node_modules/@types')] }, include: ['main.ts'] }),
  );
  writeFileSync(
    join(project, 'main.ts'),
    `import { EnvdClient, EnvdError, type CommandResult } from 'envd/client';
const client = new EnvdClient({ url: process.argv[2]!, token: process.argv[3] });
const result: CommandResult = await client.commands.run({ cmd: 'echo consumer' });
const code: number = result.exit_code;
const failed = await client.files.read('/no/such').catch((e: unknown) => (e instanceof EnvdError ? e.status : -1));
console.log(JSON.stringify({ stdout: result.stdout, code, failed }));
`,
  );
});
afterAll(async () => {
  rmSync(project, { recursive: true, force: true });
  await server.close();
});

it('another TS project imports envd/client, type-checks it and runs it against a real envd', async () => {
  await run(process.execPath, [resolve('node_modules/typescript/bin/tsc'), '-p', project]);
  const { stdout } = await run(process.execPath, [join(project, 'out', 'main.js'), server.url, server.token]);
  expect(JSON.parse(stdout)).toEqual({ stdout: 'consumer\n', code: 0, failed: 404 });
});

it('a wrong field is a compile error in the consumer (the types are the server schemas)', async () => {
  writeFileSync(join(project, 'main.ts'), `import { EnvdClient } from 'envd/client';\nawait new EnvdClient({ url: 'http://x' }).commands.run({ cmd: 1 });\n`);
  await expect(run(process.execPath, [resolve('node_modules/typescript/bin/tsc'), '-p', project])).rejects.toMatchObject({ stdout: expect.stringContaining('TS2322') });
});
