// Imported first by main.ts, so it runs before any other module is evaluated.
// Node sets the title through libuv, which also renames the main thread
// (prctl PR_SET_NAME): ps, top, systemd-cgtop and the kernel's OOM messages
// read that name, and the single executable's main thread is otherwise
// "MainThread" (plain node's is "node"). The command line shown by `ps -o args`
// becomes "envd" too.
process.title = 'envd';
