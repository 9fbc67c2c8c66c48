#!/usr/bin/env node
// Launcher of the `aware` binary: runs the executable of the platform package npm installed
// beside this one (an optional dependency chosen by its `os` and `cpu` fields), with the same
// arguments, standard streams and environment, and exits as it exits. Node runs only this file;
// the gateway, the hooks and the MCP server are the native binary.
"use strict";

const { spawnSync } = require("node:child_process");
const path = require("node:path");

const PLATFORMS = {
  "linux-x64": "@aware-hub/aware-linux-x64",
  "linux-arm64": "@aware-hub/aware-linux-arm64",
  "darwin-arm64": "@aware-hub/aware-darwin-arm64",
  "darwin-x64": "@aware-hub/aware-darwin-x64",
};

const key = `${process.platform}-${process.arch}`;
const pkg = PLATFORMS[key];
if (!pkg) {
  process.stderr.write(
    `aware: no prebuilt binary for ${key} (built: ${Object.keys(PLATFORMS).join(", ")}); ` +
      "build from source: cargo install --path crates/aware --locked\n",
  );
  process.exit(2);
}

let exe;
try {
  exe = path.join(path.dirname(require.resolve(`${pkg}/package.json`)), "bin", "aware");
} catch (_) {
  process.stderr.write(
    `aware: the platform package ${pkg} is not installed (npm skipped the optional ` +
      "dependency?); reinstall without --omit=optional, or build from source: " +
      "cargo install --path crates/aware --locked\n",
  );
  process.exit(2);
}

const run = spawnSync(exe, process.argv.slice(2), { stdio: "inherit" });
if (run.error) {
  process.stderr.write(`aware: cannot run ${exe}: ${run.error.message}\n`);
  process.exit(2);
}
if (run.signal) {
  // Die of the same signal, so a caller sees what the binary saw.
  process.kill(process.pid, run.signal);
}
process.exit(run.status === null ? 1 : run.status);
