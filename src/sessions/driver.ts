import { randomBytes } from 'node:crypto';

/**
 * The session's side of the protocol (docs/api.md, "Sessions: the protocol"):
 * a POSIX shell loop that bash and busybox sh both run as `sh -l -c DRIVER`,
 * under the command's holder. envd writes one line per command to the shell's
 * stdin (the holder's pipe); the shell answers on its own stdout and stderr
 * (the holder's pipes) by framing the command's output between markers that
 * carry a fresh random nonce:
 *
 *   stdout: RS "envd:" N ":b" RS   <the command's stdout>   RS "envd:" N ":e:" STATUS RS
 *   stderr: RS "envd:" N ":b" RS   <the command's stderr>   RS "envd:" N ":e" RS
 *
 * (RS is the byte 0x1e; ":x:" instead of ":e:" when the command ended the shell).
 * The nonce is 128 random bits that exist only in the line envd wrote to the
 * shell's input, so no output a command prints (markers it found in a log,
 * no final newline, binary noise) can end its frame or forge its status.
 * Bytes outside a frame (a background job's output between commands, the
 * profile's) belong to no command and are dropped.
 *
 * Each command runs in the shell itself (`command eval`: a syntax error
 * returns 2 instead of ending the shell), so cd, variables, functions,
 * aliases, umask, `set -o` and `$?` carry over; its stdin is /dev/null or the file
 * envd wrote for it, never the command channel. SIGINT (the timeout) makes the
 * shell's trap return 130 from the command; a background job ignores it (the
 * shell starts `&` jobs with SIGINT ignored), so it lives on.
 */
export const DRIVER = [
  // The channel: the shell's own stdin, stdout and stderr (the holder's), kept on 7, 8 and 9, which every
  // command runs without; a command's `exec >file` or `exec </dev/null` cannot cut the frames or the loop.
  'exec 7<&0 8>&1 9>&2',
  "__envd_nl='\n'",
  // `command printf`: a function a user names printf cannot take the markers over.
  // The user's `set -x` stays on for their commands, never for the driver's own lines.
  // `$?` carries over: the previous command's status is restored just before the user's text runs, in an
  // `if` condition (where `set -e` does not look: a carried status is no failure of this command), its
  // trace under the user's `set -x` sent to /dev/null.
  '__envd_r() { return "$1"; }',
  // The interrupt (a timeout, a client gone) returns 130 with `set -e` off for the moment, so the session lives
  // on under `set -e` as the rule says; __envd_run turns it back on.
  "__envd_x() { trap '__envd_i=$-; set +e; return 130' INT; case $__envd_o in *x*) set -x;; esac; if { __envd_r \"$__envd_s\"; } 2>/dev/null; then command eval \"$1\"; else command eval \"$1\"; fi; }",
  '__envd_run() {',
  '  __envd_n=$1',
  "  command printf '\\036envd:%s:b\\036' \"$1\" >&8; command printf '\\036envd:%s:b\\036' \"$1\" >&9",
  '  if [ -n "$3" ]; then __envd_x "$2" <"$3" 7<&- 8>&- 9>&-; else __envd_x "$2" </dev/null 7<&- 8>&- 9>&-; fi',
  // Silently: under the user's `set -x` a traced `__envd_s=0` would end up in the command's stderr.
  '  { __envd_s=$?; __envd_o=$-; set +x; case $__envd_i in *e*) set -e;; esac; __envd_i=; } 2>/dev/null',
  '  trap : INT',
  "  command printf '\\036envd:%s:e\\036' \"$1\" >&9; command printf '\\036envd:%s:e:%s\\036' \"$1\" \"$__envd_s\" >&8",
  '  __envd_n=',
  '}',
  // `exit N` (or `set -e` and a failure) inside a command: its frame still closes, with ":x:" and the status.
  '__envd_exit() {',
  '  __envd_s=$?',
  '  if [ -n "$__envd_n" ]; then',
  // Inside the command (bash runs the trap there) 8 and 9 are closed: the command's own stdout and stderr then.
  "    { command printf '\\036envd:%s:e\\036' \"$__envd_n\" >&9; } 2>/dev/null || command printf '\\036envd:%s:e\\036' \"$__envd_n\" >&2",
  "    { command printf '\\036envd:%s:x:%s\\036' \"$__envd_n\" \"$__envd_s\" >&8; } 2>/dev/null || command printf '\\036envd:%s:x:%s\\036' \"$__envd_n\" \"$__envd_s\"",
  '  fi',
  '}',
  '__envd_n= __envd_o= __envd_s=0 __envd_i=',
  'trap __envd_exit EXIT',
  // A handler, not an ignore: an ignored signal would stay ignored in every program the session starts.
  'trap : INT',
  '[ -n "$BASH_VERSION" ] && shopt -s expand_aliases',
  'while IFS= read -r __envd_l <&7; do eval "$__envd_l"; done',
].join('\n');

/** A command's nonce: 128 random bits in hex. */
export function newNonce(): string {
  return randomBytes(16).toString('hex');
}

/**
 * One line for the driver: `__envd_run NONCE 'CMD' 'STDIN'`. Each argument
 * is single-quoted (any byte but NUL is literal there), `'` as `'\''`, and a
 * newline leaves the quotes as `"$__envd_nl"`, so the whole request is one
 * line that `read -r` takes in one piece.
 */
export function commandLine(nonce: string, cmd: string, stdinPath: string): string {
  return `__envd_run ${nonce} ${quoteLine(cmd)} ${quoteLine(stdinPath)}\n`;
}

/** Single quotes, one physical line: `'` as '\'' and a newline as "${NL}" outside the quotes. */
function quoteLine(text: string): string {
  return `'${text.replaceAll("'", "'\\''").replaceAll('\n', `'"$__envd_nl"'`)}'`;
}
