#!/usr/bin/env node
// 2026-07-28 MCP client (@modelcontextprotocol/client 2.4.0, the official
// TypeScript v2 client). By default pinned to 2026-07-28:
//   versionNegotiation: { mode: { pin: '2026-07-28' } }
// so it probes with server/discover and never falls back to initialize.
// One JSON object per line on stdout; see README.md for the event vocabulary.

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import { CallTracker, emit, errorInfo, fail, makeWireFetch, parseArgs, sleep, splitCommand, tapStdioTransport } from './lib.mjs';

const USAGE = `usage: node call2026.mjs (--url URL | --stdio 'CMD ARGS') --tool NAME [options]
  --mode pin|auto|legacy       version negotiation (default pin):
                                 pin    versionNegotiation {mode:{pin:'2026-07-28'}} (server/discover, no fallback)
                                 auto   versionNegotiation {mode:'auto'} (server/discover, falls back to initialize)
                                 legacy no versionNegotiation (plain 2025 initialize)
  --protocol-version V         pin mode: the pinned version (default 2026-07-28);
                               legacy mode: the only version offered in initialize
  --args JSON                  tool arguments (default {})
  --cancel-after-progress N    abort after N progress notifications (0: right after sending)
  --cancel-after-ms N          abort N ms after sending the call
  --reason TEXT                cancellation reason (stdio notifications/cancelled; default "cancelled by test client")
  --linger-ms N                after an abort, keep listening N ms for late messages (default 1000)
  --timeout-ms N               SDK request timeout (default 60000; on expiry the SDK cancels)
  --header NAME:VALUE          extra HTTP header on every request (repeatable)
  --no-list                    skip tools/list
  --list-only                  connect, list tools, exit (no --tool needed)
  --list-changed               configure listChanged.tools (modern era: the client opens subscriptions/listen)
  --no-delete                  legacy mode over HTTP: do not send DELETE for the session at the end
  --no-wire                    do not print wire events`;

const opts = parseArgs(process.argv.slice(2), USAGE);
const tracker = new CallTracker();
const wire = !opts['no-wire'];
const mode = opts.mode ?? 'pin';
if (!['pin', 'auto', 'legacy'].includes(mode)) fail(`--mode must be pin, auto or legacy\n${USAGE}`);

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

const clientOptions = { capabilities: {} };
if (mode === 'pin') clientOptions.versionNegotiation = { mode: { pin: opts['protocol-version'] ?? '2026-07-28' } };
if (mode === 'auto') clientOptions.versionNegotiation = { mode: 'auto' };
if (mode === 'legacy' && opts['protocol-version']) clientOptions.supportedProtocolVersions = [opts['protocol-version']];
if (opts['list-changed']) {
    clientOptions.listChanged = {
        tools: {
            autoRefresh: true,
            onChanged: (err, tools) => emit({ event: 'list_changed', error: err ? String(err) : undefined, tools: tools?.map((t) => t.name) })
        }
    };
}

const client = new Client({ name: 'mcpcancel-call2026', version: '0.0.0' }, clientOptions);
let closing = false;
client.onerror = (e) => emit({ event: 'sdk_error', ...errorInfo(e), ...(closing && { during: 'close' }) });
client.fallbackNotificationHandler = async (n) => emit({ event: 'notification', method: n.method, params: n.params });

emit({
    event: 'start',
    sdk: '@modelcontextprotocol/client@2.4.0',
    transport: opts.url ? 'http' : 'stdio',
    target: opts.url ?? opts.stdio,
    mode,
    versionNegotiation: clientOptions.versionNegotiation
});

try {
    await client.connect(transport, { timeout: opts.timeoutMs });
} catch (e) {
    emit({ event: 'error', phase: 'connect', ...errorInfo(e) });
    await client.close().catch(() => {});
    process.exit(1);
}
emit({
    event: 'connected',
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    sessionId: transport.sessionId,
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
    instructions: client.getInstructions(),
    discover: client.getDiscoverResult(),
    listenOpened: client.autoOpenedSubscription !== undefined
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
    const pending = client.callTool({ name: opts.tool, arguments: opts.args }, { signal: ac.signal, onprogress, timeout: opts.timeoutMs });
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
        emit({
            event: 'linger_done',
            lateCount: tracker.late.length,
            lateResponses: tracker.late.filter((l) => l.kind === 'response').length,
            lateProgress: tracker.late.filter((l) => l.kind === 'progress').length
        });
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
    await client.autoOpenedSubscription?.close().catch(() => {});
    await client.close().catch((e) => emit({ event: 'error', phase: 'close', ...errorInfo(e) }));
    emit({ event: 'closed' });
}
