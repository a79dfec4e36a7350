#!/usr/bin/env node
// A tiny 2025-era MCP server built on the official SDK's McpServer
// (@modelcontextprotocol/sdk 1.32.2), used to check the client scripts before
// the gateway exists, and as a reference peer.
//
//   node fake-server2025.mjs                       stdio
//   node fake-server2025.mjs --http PORT [--json]  Streamable HTTP on 127.0.0.1:PORT/mcp
//                                                  (PORT 0 = any free port), sessionful;
//                                                  --json answers with application/json
//                                                  instead of SSE
//
// Tools: sleep {seconds, steps} (progress per step, honours cancellation),
// echo {text}, and the conformance suite's test_simple_text,
// test_tool_with_progress, test_error_handling.
//
// Server-side events are JSON lines on stderr, e.g.
//   {"server":"call_start","tool":"sleep","requestId":2,"progressToken":2}
//   {"server":"call_cancelled","tool":"sleep","requestId":2,"reason":"..."}
//   {"server":"call_done","tool":"sleep","requestId":2}
// In HTTP mode the first stdout line is {"event":"listening","port":N,"url":"..."}.

import { randomUUID } from 'node:crypto';
import http from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod';

const argv = process.argv.slice(2);
const httpIdx = argv.indexOf('--http');
const httpPort = httpIdx >= 0 ? Number(argv[httpIdx + 1]) : undefined;
const jsonResponses = argv.includes('--json');

const log = (o) => process.stderr.write(JSON.stringify({ t: Date.now(), ...o }) + '\n');

function abortableSleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal.aborted) return reject(signal.reason);
        const timer = setTimeout(() => {
            signal.removeEventListener('abort', onAbort);
            resolve();
        }, ms);
        const onAbort = () => {
            clearTimeout(timer);
            reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
    });
}

function buildServer() {
    const server = new McpServer({ name: 'fake-server2025', version: '0.0.0' }, { capabilities: { logging: {}, tools: { listChanged: true } } });

    server.registerTool(
        'sleep',
        {
            description: 'Sleeps `seconds`, reporting progress `steps` times; stops when cancelled.',
            inputSchema: { seconds: z.number().min(0).default(1), steps: z.number().int().min(1).default(5) }
        },
        async ({ seconds, steps }, extra) => {
            const token = extra._meta?.progressToken;
            log({ server: 'call_start', tool: 'sleep', requestId: extra.requestId, progressToken: token, sessionId: extra.sessionId });
            try {
                for (let i = 1; i <= steps; i++) {
                    await abortableSleep((seconds * 1000) / steps, extra.signal);
                    if (token !== undefined) {
                        await extra.sendNotification({
                            method: 'notifications/progress',
                            params: { progressToken: token, progress: i, total: steps, message: `step ${i}/${steps}` }
                        });
                    }
                }
            } catch (e) {
                log({ server: 'call_cancelled', tool: 'sleep', requestId: extra.requestId, reason: String(extra.signal.reason ?? e) });
                throw e;
            }
            log({ server: 'call_done', tool: 'sleep', requestId: extra.requestId });
            return { content: [{ type: 'text', text: `slept ${seconds}s in ${steps} steps` }] };
        }
    );

    server.registerTool(
        'echo',
        { description: 'Returns its text argument.', inputSchema: { text: z.string() } },
        async ({ text }, extra) => {
            log({ server: 'call_start', tool: 'echo', requestId: extra.requestId });
            return { content: [{ type: 'text', text }] };
        }
    );

    server.registerTool('test_simple_text', { description: 'Conformance: simple text' }, async () => ({
        content: [{ type: 'text', text: 'This is a simple text response for testing.' }]
    }));

    server.registerTool('test_tool_with_progress', { description: 'Conformance: progress 0/50/100' }, async (extra) => {
        const token = extra._meta?.progressToken;
        for (const p of [0, 50, 100]) {
            if (token !== undefined) {
                await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: p, total: 100 } });
            }
            if (p < 100) await abortableSleep(50, extra.signal);
        }
        return { content: [{ type: 'text', text: 'Progress tool completed' }] };
    });

    server.registerTool('test_error_handling', { description: 'Conformance: isError result' }, async () => ({
        isError: true,
        content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }]
    }));

    return server;
}

if (httpPort === undefined) {
    const server = buildServer();
    await server.connect(new StdioServerTransport());
    log({ server: 'stdio_ready' });
} else {
    const transports = new Map(); // session id -> transport

    const readBody = (req) =>
        new Promise((resolve, reject) => {
            const chunks = [];
            req.on('data', (c) => chunks.push(c));
            req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
            req.on('error', reject);
        });

    const jsonError = (res, status, code, message) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
    };

    const httpServer = http.createServer(async (req, res) => {
        try {
            const url = new URL(req.url, 'http://localhost');
            if (url.pathname !== '/mcp') return jsonError(res, 404, -32000, 'Not found');
            log({ server: 'http', method: req.method, sessionId: req.headers['mcp-session-id'], protocolVersion: req.headers['mcp-protocol-version'] });
            let body;
            if (req.method === 'POST') {
                const text = await readBody(req);
                try {
                    body = JSON.parse(text);
                } catch {
                    return jsonError(res, 400, -32700, 'Parse error');
                }
            }
            const sid = req.headers['mcp-session-id'];
            let transport = sid ? transports.get(sid) : undefined;
            if (sid && !transport) return jsonError(res, 404, -32001, 'Session not found');
            if (!transport) {
                if (req.method !== 'POST' || !isInitializeRequest(body)) {
                    return jsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
                }
                transport = new StreamableHTTPServerTransport({
                    sessionIdGenerator: () => randomUUID(),
                    enableJsonResponse: jsonResponses,
                    onsessioninitialized: (id) => {
                        transports.set(id, transport);
                        log({ server: 'session_open', sessionId: id });
                    },
                    onsessionclosed: (id) => log({ server: 'session_deleted', sessionId: id })
                });
                transport.onclose = () => {
                    if (transport.sessionId) transports.delete(transport.sessionId);
                };
                await buildServer().connect(transport);
            }
            await transport.handleRequest(req, res, body);
        } catch (e) {
            log({ server: 'http_error', error: String(e) });
            if (!res.headersSent) jsonError(res, 500, -32603, 'Internal error');
        }
    });
    httpServer.listen(httpPort, '127.0.0.1', () => {
        const { port } = httpServer.address();
        process.stdout.write(JSON.stringify({ event: 'listening', port, url: `http://127.0.0.1:${port}/mcp` }) + '\n');
    });
    const stop = () => {
        for (const t of transports.values()) t.close().catch(() => {});
        httpServer.close();
        process.exit(0);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
}
