#!/usr/bin/env node
// 2025-era MCP client (@modelcontextprotocol/sdk 1.32.2): initialize handshake,
// Mcp-Session-Id, notifications/cancelled on cancel. One JSON object per line
// on stdout; see README.md for the event vocabulary.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

import { CallTracker, emit, errorInfo, makeWireFetch, parseArgs, sleep, splitCommand, tapStdioTransport } from './lib.mjs';

const USAGE = `usage: node call2025.mjs (--url URL | --stdio 'CMD ARGS') --tool NAME [options]
  --args JSON                  tool arguments (default {})
  --cancel-after-progress N    abort after N progress notifications (0: right after sending)
  --cancel-after-ms N          abort N ms after sending the call
  --reason TEXT                cancellation reason (default "cancelled by test client")
  --linger-ms N                after an abort, keep listening N ms for late messages (default 1000)
  --timeout-ms N               SDK request timeout (default 60000; on expiry the SDK cancels)
  --protocol-version V         offer V in initialize instead of the SDK's 2025-11-25 (wire rewrite)
  --header NAME:VALUE          extra HTTP header on every request (repeatable)
  --no-list                    skip tools/list
  --list-only                  connect, list tools, exit (no --tool needed)
  --list-changed               register a tools listChanged handler (prints list_changed events)
  --no-delete                  do not send HTTP DELETE for the session at the end
  --no-wire                    do not print wire events`;

const opts = parseArgs(process.argv.slice(2), USAGE);
const tracker = new CallTracker();
const wire = !opts['no-wire'];

let transport;
if (opts.url) {
    transport = new StreamableHTTPClientTransport(new URL(opts.url), {
        fetch: makeWireFetch({ enabled: wire, tracker, extraHeaders: opts.headers })
    });
} else {
    tapStdioTransport(StdioClientTransport, { enabled: wire, tracker });
    const [command, ...args] = splitCommand(opts.stdio);
    transport = new StdioClientTransport({ command, args, env: process.env, stderr: 'inherit' });
}

if (opts['protocol-version']) {
    // sdk 1.32.2 always offers LATEST_PROTOCOL_VERSION (2025-11-25); rewrite the
    // outgoing initialize so older revisions can be exercised.
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
        if (message?.method === 'initialize') {
            message = { ...message, params: { ...message.params, protocolVersion: opts['protocol-version'] } };
        }
        return send(message, options);
    };
}

const client = new Client(
    { name: 'mcpcancel-call2025', version: '0.0.0' },
    {
        capabilities: {},
        ...(opts['list-changed'] && {
            listChanged: {
                tools: {
                    autoRefresh: true,
                    onChanged: (err, tools) =>
                        emit({ event: 'list_changed', error: err ? String(err) : undefined, tools: tools?.map((t) => t.name) })
                }
            }
        })
    }
);
let closing = false;
client.onerror = (e) => emit({ event: 'sdk_error', ...errorInfo(e), ...(closing && { during: 'close' }) });
client.fallbackNotificationHandler = async (n) => emit({ event: 'notification', method: n.method, params: n.params });

emit({ event: 'start', sdk: '@modelcontextprotocol/sdk@1.32.2', transport: opts.url ? 'http' : 'stdio', target: opts.url ?? opts.stdio });

try {
    await client.connect(transport, { timeout: opts.timeoutMs });
} catch (e) {
    emit({ event: 'error', phase: 'connect', ...errorInfo(e) });
    await client.close().catch(() => {});
    process.exit(1);
}
emit({
    event: 'connected',
    protocolVersion: transport.protocolVersion,
    sessionId: transport.sessionId,
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
    instructions: client.getInstructions()
});

let exitCode = 0;
try {
    if (!opts['no-list'] || opts['list-only']) {
        try {
            const { tools } = await client.listTools(undefined, { timeout: opts.timeoutMs });
            emit({ event: 'tools', tools: tools.map((t) => t.name) });
        } catch (e) {
            emit({ event: 'error', phase: 'list', ...errorInfo(e) });
            exitCode = 1;
        }
    }
    if (!opts['list-only'] && exitCode === 0) await callOnce();
} finally {
    await shutdown();
}
process.exit(exitCode);

async function callOnce() {
    const ac = new AbortController();
    let progressCount = 0;
    let cancelled = false;
    let timer;
    const doCancel = (trigger) => {
        if (cancelled) return;
        cancelled = true;
        tracker.markCancelled();
        emit({ event: 'cancel_sent', trigger, reason: opts.reason, progressSeen: progressCount });
        ac.abort(opts.reason);
    };
    const onprogress = (p) => {
        progressCount++;
        emit({ event: 'progress', progress: p.progress, total: p.total, message: p.message });
        if (opts.cancelAfterProgress !== undefined && opts.cancelAfterProgress > 0 && progressCount >= opts.cancelAfterProgress) {
            doCancel('progress');
        }
    };
    const pending = client.callTool({ name: opts.tool, arguments: opts.args }, CallToolResultSchema, {
        signal: ac.signal,
        onprogress,
        timeout: opts.timeoutMs
    });
    if (opts.cancelAfterProgress === 0) setImmediate(() => doCancel('immediate'));
    if (opts.cancelAfterMs !== undefined) timer = setTimeout(() => doCancel('timer'), opts.cancelAfterMs);
    try {
        const result = await pending;
        emit({ event: 'result', result });
    } catch (e) {
        if (ac.signal.aborted) emit({ event: 'aborted', ...errorInfo(e) });
        else emit({ event: 'error', phase: 'call', ...errorInfo(e) });
    } finally {
        clearTimeout(timer);
    }
    if (cancelled) {
        await sleep(opts.lingerMs);
        emit({ event: 'linger_done', lateCount: tracker.late.length, lateResponses: tracker.late.filter((l) => l.kind === 'response').length, lateProgress: tracker.late.filter((l) => l.kind === 'progress').length });
    }
}

async function shutdown() {
    closing = true;
    if (opts.url && !opts['no-delete'] && transport.sessionId) {
        try {
            await transport.terminateSession();
            emit({ event: 'session_deleted' });
        } catch (e) {
            emit({ event: 'error', phase: 'delete', ...errorInfo(e) });
        }
    }
    await client.close().catch((e) => emit({ event: 'error', phase: 'close', ...errorInfo(e) }));
    emit({ event: 'closed' });
}
