#!/usr/bin/env node
// 2025-era MCP client (@modelcontextprotocol/sdk 1.32.2) that declares
// sampling, elicitation and roots and answers the server's requests with
// what its flags say. One JSON object per line on stdout (see README.md).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
    CallToolResultSchema,
    CreateMessageRequestSchema,
    ElicitRequestSchema,
    ListRootsRequestSchema,
    LoggingMessageNotificationSchema
} from '@modelcontextprotocol/sdk/types.js';

import { CallTracker, emit, errorInfo, makeWireFetch, parseArgs, sleep, splitCommand, tapStdioTransport } from './lib.mjs';

const USAGE = `usage: node asking2025.mjs (--url URL | --stdio 'CMD ARGS') --tool NAME [options]
  --args JSON               tool arguments (default {})
  --sampling-text TEXT      answer sampling/createMessage with this text (default "sampled")
  --elicit-content JSON     answer elicitation/create: accept with this content (default {})
  --roots JSON              answer roots/list with these roots (default [])
  --cancel-on-sampling      abort the call when its sampling request arrives; never answer it
  --linger-ms N             after an abort, keep listening N ms for late messages (default 1000)
  --until-log TEXT          after the call, keep listening until a log holding TEXT arrives (at most 30 s)
  --no-wire                 do not print wire events`;

const opts = parseArgs(process.argv.slice(2), USAGE);
const tracker = new CallTracker();
const wire = !opts['no-wire'];
const samplingText = opts['sampling-text'] ?? 'sampled';
const elicitContent = JSON.parse(opts['elicit-content'] ?? '{}');
const roots = JSON.parse(opts.roots ?? '[]');
const cancelOnSampling = opts['cancel-on-sampling'] === 'true' || opts['cancel-on-sampling'] === true;

let transport;
if (opts.url) {
    transport = new StreamableHTTPClientTransport(new URL(opts.url), { fetch: makeWireFetch({ enabled: wire, tracker, extraHeaders: opts.headers }) });
} else {
    tapStdioTransport(StdioClientTransport, { enabled: wire, tracker });
    const [command, ...args] = splitCommand(opts.stdio);
    transport = new StdioClientTransport({ command, args, env: process.env, stderr: 'inherit' });
}

const client = new Client(
    { name: 'mcpcancel-asking2025', version: '0.0.0' },
    { capabilities: { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: false } } }
);
client.onerror = (e) => emit({ event: 'sdk_error', ...errorInfo(e) });

const ac = new AbortController();
let cancelled = false;
const doCancel = (trigger) => {
    if (cancelled) return;
    cancelled = true;
    tracker.markCancelled();
    emit({ event: 'cancel_sent', trigger });
    ac.abort('cancelled by test client');
};

client.setRequestHandler(CreateMessageRequestSchema, async (req, extra) => {
    emit({ event: 'sampling_request', requestId: extra.requestId, params: req.params });
    if (!cancelOnSampling) {
        return { role: 'assistant', content: { type: 'text', text: samplingText }, model: 'test-model', stopReason: 'endTurn' };
    }
    const aborted = new Promise((resolve) => extra.signal.addEventListener('abort', () => resolve(extra.signal.reason)));
    doCancel('sampling');
    const reason = await aborted;
    emit({ event: 'sampling_aborted', requestId: extra.requestId, msAfterCancel: Date.now() - tracker.cancelledAt, reason: String(reason) });
    throw new Error('aborted');
});
client.setRequestHandler(ElicitRequestSchema, async (req, extra) => {
    emit({ event: 'elicitation_request', requestId: extra.requestId, params: req.params });
    return { action: 'accept', content: elicitContent };
});
client.setRequestHandler(ListRootsRequestSchema, async (req, extra) => {
    emit({ event: 'roots_request', requestId: extra.requestId });
    return { roots };
});
const untilLog = opts['until-log'];
let sawLog;
const logSeen = new Promise((resolve) => { sawLog = resolve; });
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    const data = JSON.stringify(n.params.data);
    emit({ event: 'log', level: n.params.level, data: n.params.data });
    if (untilLog && data.includes(untilLog)) sawLog(true);
});

emit({ event: 'start', sdk: '@modelcontextprotocol/sdk@1.32.2', transport: opts.url ? 'http' : 'stdio', target: opts.url ?? opts.stdio });
let exitCode = 0;
try {
    await client.connect(transport, { timeout: opts.timeoutMs });
    emit({ event: 'connected', sessionId: transport.sessionId, protocolVersion: transport.protocolVersion });
    try {
        const result = await client.callTool({ name: opts.tool, arguments: opts.args }, CallToolResultSchema, { signal: ac.signal, timeout: opts.timeoutMs });
        emit({ event: 'result', result });
    } catch (e) {
        if (ac.signal.aborted) emit({ event: 'aborted', ...errorInfo(e) });
        else {
            emit({ event: 'error', phase: 'call', ...errorInfo(e) });
            exitCode = 1;
        }
    }
    if (untilLog) {
        const seen = await Promise.race([logSeen, sleep(30000).then(() => false)]); // a bound, not a wait for anything
        emit({ event: 'until_log', seen });
    }
    if (cancelled) {
        await sleep(opts.lingerMs);
        emit({ event: 'linger_done', lateCount: tracker.late.length, lateResponses: tracker.late.filter((l) => l.kind === 'response').length });
    }
} catch (e) {
    emit({ event: 'error', phase: 'connect', ...errorInfo(e) });
    exitCode = 1;
} finally {
    if (opts.url && transport.sessionId) await transport.terminateSession().catch(() => {});
    await client.close().catch(() => {});
    emit({ event: 'closed' });
}
process.exit(exitCode);
