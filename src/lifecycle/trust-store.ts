import { X509Certificate } from 'node:crypto';
import { badRequest } from '../errors.js';

/**
 * Where images keep the PEM bundle that OpenSSL, curl, Python and Go read,
 * in the order a path is exported to commands: Debian/Ubuntu (and Alpine's
 * ca-certificates), Alpine/busybox's own, RHEL/Fedora's (a link into
 * /etc/pki/ca-trust). Every one that exists gets the certificates.
 */
export const TRUST_STORES: readonly string[] = ['/etc/ssl/certs/ca-certificates.crt', '/etc/ssl/cert.pem', '/etc/pki/tls/certs/ca-bundle.crt'];

/** Made when an image has none of TRUST_STORES (a bare busybox): then it holds only /init's certificates. */
export const NEW_TRUST_STORE = '/etc/ssl/certs/ca-certificates.crt';

/** The variables commands get, all naming the store: each tool reads a different one. */
export const TRUST_STORE_VARIABLES = ['SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS', 'REQUESTS_CA_BUNDLE'] as const;

/** The largest `ca_bundle` /init takes (a few hundred certificates). */
export const MAX_CA_BUNDLE_BYTES = 1024 * 1024;

const BEGIN_MARK = '# envd /init ca_bundle: begin';
const END_MARK = '# envd /init ca_bundle: end';
const CERTIFICATE = /-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----/g;

/**
 * The certificates of a `ca_bundle`, each checked by OpenSSL, as one PEM
 * text. Anything between them (comments, a private key pasted by mistake) is
 * left out; a bundle with no certificate, or one that does not parse, is a 400.
 */
export function checkCaBundle(pem: string): string {
  const blocks = pem.match(CERTIFICATE) ?? [];
  if (blocks.length === 0) throw badRequest('ca_bundle: no PEM certificate (-----BEGIN CERTIFICATE----- … -----END CERTIFICATE-----)');
  blocks.forEach((block, index) => {
    try {
      new X509Certificate(block);
    } catch (error) {
      throw badRequest(`ca_bundle: certificate ${index + 1} of ${blocks.length} does not parse (${(error as Error).message})`);
    }
  });
  return blocks.map((block) => block.replace(/\r\n/g, '\n')).join('\n');
}

/**
 * A store's text with /init's certificates in place of any an earlier /init
 * added (between envd's marks), so that /init sent twice, at restore and at
 * each fork, does not grow the store.
 */
export function withCertificates(store: string, certificates: string): string {
  const start = store.indexOf(BEGIN_MARK);
  const end = store.indexOf(END_MARK);
  const kept = start >= 0 && end > start ? store.slice(0, start) + store.slice(end + END_MARK.length).replace(/^\n/, '') : store;
  const base = kept === '' || kept.endsWith('\n') ? kept : `${kept}\n`;
  return `${base}${BEGIN_MARK}\n${certificates}\n${END_MARK}\n`;
}
