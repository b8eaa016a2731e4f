// An app's "Update" button in Node/Electron (main process): run `llama-runtime update --events`,
// read one JSON object per line, drive a progress bar, and cancel with SIGTERM.
//
//   node update-button.js [llama-runtime] [extra args…]      (prints what a progress bar would show)
//   LLAMA_RUNTIME_CANCEL_AFTER_BYTES=N cancels once N bytes arrived (what a Cancel button does)
//
// An app started from a desktop (Finder, the Start menu, a .desktop file) does not get the PATH of
// a terminal, so a bare `llama-runtime` is often not found there: pass the CLI's absolute path (the
// first argument, or LLAMA_RUNTIME_CLI), e.g. the one your installer put next to the app. When the
// CLI cannot be started, runUpdate resolves with { code: null, error } and this script says so and
// exits 127, instead of dying of an unhandled 'error' event.
'use strict';
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');

// The exit status of a shell whose command was not found: what this script exits with then.
const NOT_FOUND_EXIT = 127;

function notStartedMessage(command, error) {
  if (error.code === 'ENOENT' && path.isAbsolute(command)) {
    return `cannot start ${command}: no such file (pass the path of an installed llama-runtime)`;
  }
  if (error.code === 'ENOENT') {
    return `cannot start ${command}: it is not on this app's PATH ` +
      '(an app started from a desktop often has a shorter PATH than a terminal); ' +
      "pass the CLI's absolute path as the first argument or in LLAMA_RUNTIME_CLI";
  }
  return `cannot start ${command}: ${error.message}`;
}

function runUpdate(command, args, onEvent) {
  // stdout carries only JSON Lines; logs go to stderr (show them in a details pane if you like).
  const child = spawn(command, ['update', '--events', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout });
  let last = null;
  lines.on('line', (line) => {
    let event;
    try {
      event = JSON.parse(line);
    } catch {
      return; // not an event (an old CLI, or a wrapper script's own output): skip it
    }
    last = event;
    onEvent(event, child);
  });
  return new Promise((resolve) => {
    let settled = false;
    // Without this handler a CLI that cannot be started (ENOENT, EACCES) crashes the whole app.
    child.on('error', (error) => {
      if (!settled) {
        settled = true;
        resolve({ code: null, last, error });
      }
    });
    child.on('close', (code) => {
      if (!settled) {
        settled = true;
        resolve({ code, last });
      }
    });
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
  const [command = process.env.LLAMA_RUNTIME_CLI || 'llama-runtime', ...args] = process.argv.slice(2);
  runUpdate(command, args, show).then(({ code, error }) => {
    if (error) {
      console.error(notStartedMessage(command, error));
      process.exit(NOT_FOUND_EXIT);
    }
    process.exit(code);
  });
}

module.exports = { runUpdate, notStartedMessage };
