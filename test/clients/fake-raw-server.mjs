#!/usr/bin/env node
// A hand-rolled MCP server (no SDK) and a minimal wire reference for both eras.
// By default it is deliberately NON-compliant: it ignores cancellation and
// always sends every progress notification and the final response, so the
// client scripts' late-message reporting ({"event":"late",...}) can be checked.
// With --honor-cancel it behaves as the gateway should: on
// notifications/cancelled (or, on HTTP, when the client closes the request's
// stream) it stops the call and sends nothing more for it; on HTTP it then
// ends that request's SSE stream without a response (and without SSE event ids,
// so no client tries to resume it).
//
//   node fake-raw-server.mjs [--honor-cancel]                 stdio
//   node fake-raw-server.mjs --http PORT [--honor-cancel]     Streamable HTTP on 127.0.0.1:PORT/mcp (SSE per request)
//
// Eras: a request whose params._meta carries io.modelcontextprotocol/protocolVersion
// is served as 2026-07-28 (server/discover, resultType/ttlMs/cacheScope on
// results); `initialize` starts a 2025-era exchange (HTTP: Mcp-Session-Id "raw-session").
// Tool: sleep {seconds, steps}.

import http from 'node:http';
import readline from 'node:readline';

const argv = process.argv.slice(2);
const httpIdx = argv.indexOf('--http');
const httpPort = httpIdx >= 0 ? Number(argv[httpIdx + 1]) : undefined;
const honorCancel = argv.includes('--honor-cancel');
const inflight = new Map(); // JSON.stringify(request id) -> AbortController (ids 1 and "1" stay apart)

const PV_KEY = 'io.modelcontextprotocol/protocolVersion';
const SERVER_INFO = { name: 'fake-raw-server', version: '0.0.0' };
const LEGACY_VERSIONS = ['2025-11-25', '2025-06-18', '2025-03-26'];
const log = (o) => process.stderr.write(JSON.stringify({ t: Date.now(), ...o }) + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const isModern = (msg) => typeof msg?.params?._meta?.[PV_KEY] === 'string';

/** Handle one JSON-RPC message; `send` writes one outbound message. Resolves when done. */
async function handle(msg, send, signal) {
    if (msg.id === undefined) {
        const isCancel = msg.method === 'notifications/cancelled';
        log({ server: 'notification', method: msg.method, params: msg.params, ...(isCancel && { note: honorCancel ? 'honored' : 'ignored on purpose' }) });
        if (isCancel && honorCancel) inflight.get(JSON.stringify(msg.params?.requestId))?.abort('notifications/cancelled');
        return;
    }
    const modern = isModern(msg);
    const done = (result) => send({ jsonrpc: '2.0', id: msg.id, result: modern ? { resultType: 'complete', ...result, _meta: { 'io.modelcontextprotocol/serverInfo': SERVER_INFO } } : result });
    const error = (code, message, data) => send({ jsonrpc: '2.0', id: msg.id, error: { code, message, ...(data !== undefined && { data }) } });
    switch (msg.method) {
        case 'initialize': {
            const requested = msg.params?.protocolVersion;
            return done({
                protocolVersion: LEGACY_VERSIONS.includes(requested) ? requested : LEGACY_VERSIONS[0],
                capabilities: { tools: {} },
                serverInfo: SERVER_INFO
            });
        }
        case 'server/discover':
            return done({ supportedVersions: ['2026-07-28'], capabilities: { tools: {} }, ttlMs: 0, cacheScope: 'private' });
        case 'ping':
            return done({});
        case 'tools/list':
            return done({
                tools: [
                    {
                        name: 'sleep',
                        description: 'Sleeps and reports progress; IGNORES cancellation.',
                        inputSchema: { type: 'object', properties: { seconds: { type: 'number' }, steps: { type: 'integer' } } }
                    }
                ],
                ...(modern && { ttlMs: 0, cacheScope: 'private' })
            });
        case 'tools/call': {
            if (msg.params?.name !== 'sleep') return error(-32602, `Unknown tool: ${msg.params?.name}`);
            const { seconds = 1, steps = 5 } = msg.params.arguments ?? {};
            const token = msg.params?._meta?.progressToken;
            log({ server: 'call_start', requestId: msg.id, progressToken: token, modern });
            for (let i = 1; i <= steps; i++) {
                await sleep((seconds * 1000) / steps);
                if (honorCancel && signal?.aborted) {
                    log({ server: 'call_cancelled', requestId: msg.id, reason: String(signal.reason) });
                    return;
                }
                if (token !== undefined) {
                    send({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: token, progress: i, total: steps } });
                }
            }
            log({ server: 'call_done', requestId: msg.id });
            return done({ content: [{ type: 'text', text: `slept ${seconds}s in ${steps} steps (cancellation ignored)` }] });
        }
        default:
            return error(-32601, 'Method not found');
    }
}

if (httpPort === undefined) {
    const rl = readline.createInterface({ input: process.stdin });
    const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
    rl.on('line', (line) => {
        if (!line.trim()) return;
        let msg;
        try {
            msg = JSON.parse(line);
        } catch {
            return send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
        }
        const key = JSON.stringify(msg.id);
        const ac = new AbortController();
        if (msg.id !== undefined) inflight.set(key, ac);
        handle(msg, send, ac.signal)
            .catch((e) => log({ server: 'error', error: String(e) }))
            .finally(() => msg.id !== undefined && inflight.get(key) === ac && inflight.delete(key));
    });
    rl.on('close', () => process.exit(0));
} else {
    const httpServer = http.createServer((req, res) => {
        if (req.method === 'GET') return res.writeHead(405, { allow: 'POST, DELETE' }).end();
        if (req.method === 'DELETE') return res.writeHead(200).end();
        if (req.method !== 'POST') return res.writeHead(405).end();
        const chunks = [];
        req.on('data', (c) => chunks.push(c));
        req.on('end', async () => {
            let msg;
            try {
                msg = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch {
                res.writeHead(400, { 'content-type': 'application/json' });
                return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
            }
            if (msg.id === undefined) {
                await handle(msg, () => {});
                return res.writeHead(202).end();
            }
            const headers = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };
            if (msg.method === 'initialize') headers['mcp-session-id'] = 'raw-session';
            res.writeHead(200, headers);
            const key = JSON.stringify(msg.id);
            const ac = new AbortController();
            inflight.set(key, ac);
            res.on('close', () => {
                if (res.writableFinished) return;
                log({ server: 'http_client_closed', requestId: msg.id, note: honorCancel ? 'honored as cancellation' : 'ignored on purpose' });
                if (honorCancel) ac.abort('stream closed by client');
            });
            await handle(
                msg,
                (m) => {
                    if (!res.destroyed) res.write(`event: message\ndata: ${JSON.stringify(m)}\n\n`);
                    else log({ server: 'write_after_close', message: m });
                },
                ac.signal
            );
            if (inflight.get(key) === ac) inflight.delete(key);
            res.end();
        });
    });
    httpServer.listen(httpPort, '127.0.0.1', () => {
        const { port } = httpServer.address();
        process.stdout.write(JSON.stringify({ event: 'listening', port, url: `http://127.0.0.1:${port}/mcp` }) + '\n');
    });
    process.on('SIGTERM', () => process.exit(0));
}
