#!/usr/bin/env node
// 2025-era MCP client (@modelcontextprotocol/sdk) exercising what a server
// keeps per session: it sets a log level, subscribes to a resource, turns
// on server-everything's simulated logs and resource updates, and prints
// the log messages and resource updates it hears, one JSON object per
// line: {"event":"result","request":...,"result":...}, {"event":"log",
// "level":...,"data":...}, {"event":"updated","uri":...}, then
// {"event":"done"}.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { emit, errorInfo, fail, splitCommand } from './lib.mjs';

const USAGE = `usage: node sessions2025.mjs (--url URL | --stdio 'CMD ARGS') [options]
  --level L         logging/setLevel L first
  --subscribe URI   resources/subscribe URI
  --toggle-logs     call toggle-simulated-logging
  --toggle-updates  call toggle-subscriber-updates
  --logs N          wait for N log messages (default 0)
  --updates N       wait for N resource updates (default 0)
  --max-ms N        give up waiting after N ms (default 20000)`;

const BOOL = new Set(['toggle-logs', 'toggle-updates']);
const opts = {};
for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i];
    if (!a.startsWith('--')) fail(`unexpected argument ${JSON.stringify(a)}\n${USAGE}`);
    const name = a.slice(2);
    if (BOOL.has(name)) opts[name] = true;
    else if (i + 1 < process.argv.length) opts[name] = process.argv[++i];
    else fail(`${a} needs a value\n${USAGE}`);
}
if (!opts.url === !opts.stdio) fail(`exactly one of --url or --stdio is required\n${USAGE}`);
const wantLogs = Number(opts.logs ?? 0), wantUpdates = Number(opts.updates ?? 0);
let transport;
if (opts.url) {
    transport = new StreamableHTTPClientTransport(new URL(opts.url));
} else {
    const [command, ...args] = splitCommand(opts.stdio);
    transport = new StdioClientTransport({ command, args, env: process.env, stderr: 'ignore' });
}
const client = new Client({ name: 'mcpcancel-sessions2025', version: '0.0.0' }, { capabilities: {} });
let logs = 0, updates = 0, wake = () => {};
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    logs++;
    emit({ event: 'log', level: n.params.level, data: n.params.data });
    wake();
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    updates++;
    emit({ event: 'updated', uri: n.params.uri });
    wake();
});

try {
    await client.connect(transport);
    const step = async (request, f) => emit({ event: 'result', request, result: await f() });
    if (opts.level) await step('logging/setLevel', () => client.setLoggingLevel(opts.level));
    if (opts.subscribe) await step('resources/subscribe', () => client.subscribeResource({ uri: opts.subscribe }));
    if (opts['toggle-logs']) await step('toggle-simulated-logging', () => client.callTool({ name: 'toggle-simulated-logging', arguments: {} }));
    if (opts['toggle-updates']) await step('toggle-subscriber-updates', () => client.callTool({ name: 'toggle-subscriber-updates', arguments: {} }));
    const deadline = Date.now() + Number(opts['max-ms'] ?? 20000);
    while ((logs < wantLogs || updates < wantUpdates) && Date.now() < deadline) {
        await new Promise((r) => {
            wake = r;
            setTimeout(r, Math.max(0, deadline - Date.now()));
        });
    }
    emit({ event: 'done', logs, updates });
} catch (e) {
    emit({ event: 'error', ...errorInfo(e) });
} finally {
    await client.close().catch(() => {});
}
