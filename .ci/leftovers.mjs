// What the test suites left in the temporary directories: `snapshot FILE` before
// they run, `check FILE REPORT` after, which writes a vitest-like JSON report
// (one test, failed when anything new is left) for count.mjs to add up.
// Looked at: envd-* entries in the temporary directory (tests make theirs with
// that prefix) and tmux sockets named envd-* (a terminal test's servers).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const list = (dir) => {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
};

function current() {
  const found = new Set();
  for (const dir of new Set([tmpdir(), '/tmp'])) {
    for (const name of list(dir)) {
      if (name.startsWith('envd-')) found.add(join(dir, name));
      if (name.startsWith('tmux-')) for (const socket of list(join(dir, name))) if (socket.startsWith('envd-')) found.add(join(dir, name, socket));
    }
  }
  return [...found].sort();
}

const [command, file, report] = process.argv.slice(2);
if (command === 'snapshot') {
  writeFileSync(file, `${JSON.stringify(current())}\n`);
} else if (command === 'check') {
  const before = new Set(JSON.parse(readFileSync(file, 'utf8')));
  const left = current().filter((path) => !before.has(path));
  const name = 'the test suites leave nothing in the temporary directories';
  if (left.length === 0) console.log(`leftovers: none (${name})`);
  else console.log(`leftovers: FAIL ${left.length} left behind:\n  ${left.join('\n  ')}`);
  writeFileSync(
    report,
    JSON.stringify({
      numPassedTests: left.length === 0 ? 1 : 0,
      numFailedTests: left.length === 0 ? 0 : 1,
      numFailedTestSuites: left.length === 0 ? 0 : 1,
      numPendingTests: 0,
      numTodoTests: 0,
      testResults: [
        {
          name: '.ci/leftovers.mjs',
          status: left.length === 0 ? 'passed' : 'failed',
          assertionResults: [{ fullName: name, status: left.length === 0 ? 'passed' : 'failed', failureMessages: left.length === 0 ? [] : [`left behind: ${left.join(', ')}`] }],
        },
      ],
    }),
  );
} else {
  console.error('usage: node .ci/leftovers.mjs snapshot FILE | check FILE REPORT');
  process.exit(2);
}
