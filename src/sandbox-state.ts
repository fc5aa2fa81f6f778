import { AccessToken } from './auth.js';
import type { Limits } from './cgroups/limits.js';
import type { Config } from './config.js';

/**
 * What `POST /init` may change while envd runs: the token, the sandbox envs
 * and the defaults for commands and file ownership. Lives only in memory.
 * Features read it at request time, never copy it, so a fork's new values
 * apply to the next request.
 */
export class SandboxState {
  readonly token: AccessToken;
  envs: Record<string, string> = {};
  defaultUser: string;
  defaultWorkdir: string | undefined;
  /** /init's default_limits: what a command that names no limits of its own gets (cgroup mode). */
  defaultLimits: Limits | undefined;
  /** SSL_CERT_FILE and its kin, naming the trust store /init's ca_bundle went into; under the sandbox envs. */
  trustStoreEnvs: Record<string, string> = {};

  constructor(config: Pick<Config, 'accessToken' | 'defaultUser' | 'defaultWorkdir'>, runningAs: string) {
    this.token = new AccessToken(config.accessToken);
    this.defaultUser = config.defaultUser ?? runningAs;
    this.defaultWorkdir = config.defaultWorkdir;
  }
}
