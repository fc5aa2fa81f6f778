// envd behind nginx configured as the control plane forwards (see nginx.ts):
// every request goes to http://127.0.0.1:<nginx>/sandboxes/<id>/... The proxy
// test files each started the same pair; their differences are the options.
import { randomBytes } from 'node:crypto';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bearerClient, type BearerClient } from '../helpers/bearer-client.js';
import { commandUser } from '../helpers/command-user.js';
import { startEnvdProcess, type EnvdProcess } from '../helpers/proc.js';
import { startNginx, type Nginx } from './nginx.js';

/** Requests (call, json) go through nginx with the token. */
export interface ProxiedEnvd extends BearerClient {
  envd: EnvdProcess;
  nginx: Nginx;
  /** A temporary directory of the test's own (the plain user's, when there is one). */
  dir: string;
  token: string;
  stop(): Promise<void>;
}

export interface ProxiedOptions {
  /**
   * Commands run as a plain user made for the test (default): root's login
   * shell on the build machines runs pyenv, slow, and one killed while it
   * starts leaves a lock that stalls every later one.
   */
  plainUser?: boolean;
  /** The test's directory is envd's default working directory. */
  workdir?: boolean;
}

export async function startProxiedEnvd(name: string, options: ProxiedOptions = {}): Promise<ProxiedEnvd> {
  const token = randomBytes(16).toString('hex');
  const dir = mkdtempSync(join(tmpdir(), `envd-${name}-`));
  let removeUser = () => {};
  let envd: EnvdProcess | undefined;
  let nginx: Nginx | undefined;
  const stop = async () => {
    await nginx?.stop();
    await envd?.stop();
    removeUser();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const args: string[] = [];
    if (options.plainUser ?? true) {
      const made = await commandUser();
      removeUser = made.remove;
      chownSync(dir, made.user.uid, made.user.gid);
      args.push('--default-user', made.user.name);
    }
    if (options.workdir) args.push('--default-workdir', dir);
    envd = await startEnvdProcess(args, { ENVD_ACCESS_TOKEN: token });
    nginx = await startNginx(envd.url, `sbx-${randomBytes(4).toString('hex')}`);
  } catch (error) {
    await stop();
    throw error;
  }
  return { envd, nginx, dir, token, ...bearerClient(nginx.url, token), stop };
}
