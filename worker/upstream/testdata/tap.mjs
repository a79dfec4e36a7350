// tap.mjs LOG -- CMD ARGS...: runs CMD with its stdio piped through, and
// appends every line the child receives on stdin to LOG as "in LINE" and
// every line it writes on stdout as "out LINE", before passing it on.
// Tests read LOG to see the upstream side of the wire. Each run first
// logs "tap PID" and "server PID", the process ids of this script and CMD.
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";

const sep = process.argv.indexOf("--");
const log = process.argv[2];
const [cmd, ...args] = process.argv.slice(sep + 1);
const child = spawn(cmd, args, { stdio: ["pipe", "pipe", "inherit"] });
appendFileSync(log, `tap ${process.pid}\nserver ${child.pid}\n`);

createInterface({ input: process.stdin }).on("line", (line) => {
  appendFileSync(log, "in " + line + "\n");
  child.stdin.write(line + "\n");
}).on("close", () => child.stdin.end());

createInterface({ input: child.stdout }).on("line", (line) => {
  appendFileSync(log, "out " + line + "\n");
  process.stdout.write(line + "\n");
});

child.on("exit", (code, signal) => process.exit(code ?? 1));
