// An app's "Update" button in Node/Electron (main process): run `llama-runtime update --events`,
// read one JSON object per line, drive a progress bar, and cancel with SIGTERM.
//
//   node update-button.js [llama-runtime] [extra args…]      (prints what a progress bar would show)
//   LLAMA_RUNTIME_CANCEL_AFTER_BYTES=N cancels once N bytes arrived (what a Cancel button does)
'use strict';
const { spawn } = require('node:child_process');
const readline = require('node:readline');

function runUpdate(command, args, onEvent) {
  // stdout carries only JSON Lines; logs go to stderr (show them in a details pane if you like).
  const child = spawn(command, ['update', '--events', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout });
  let last = null;
  lines.on('line', (line) => {
    const event = JSON.parse(line);
    last = event;
    onEvent(event, child);
  });
  return new Promise((resolve) => {
    child.on('close', (code) => resolve({ code, last }));
  });
}

function show(event, child) {
  switch (event.type) {
    case 'phase':
      console.log(`phase ${event.phase}${event.message ? ': ' + event.message : ''}`);
      break;
    case 'progress': {
      const percent = event.total_bytes ? Math.floor((100 * event.done_bytes) / event.total_bytes) : null;
      const eta = event.eta == null ? '?' : `${Math.round(event.eta)}s`;
      console.log(`progress ${percent}% eta ${eta}`);
      const cancelAfter = Number(process.env.LLAMA_RUNTIME_CANCEL_AFTER_BYTES || 0);
      if (cancelAfter && event.done_bytes >= cancelAfter && !child.cancelSent) {
        child.cancelSent = true;
        // The Cancel button. On Windows, child.kill() terminates the process outright; the next
        // update resumes the partial download and the active runtime is never touched either way.
        child.kill('SIGTERM');
      }
      break;
    }
    case 'warning':
      console.log(`warning ${event.message}`);
      break;
    case 'result':
      console.log(`done ${event.result} ${event.active.tag}`);
      break;
    case 'error':
      console.log(`error ${event.error.code}: ${event.error.message}`);
      break;
  }
}

if (require.main === module) {
  const [command = 'llama-runtime', ...args] = process.argv.slice(2);
  runUpdate(command, args, show).then(({ code }) => process.exit(code));
}

module.exports = { runUpdate };
