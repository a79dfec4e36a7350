#!/usr/bin/env node
// A tiny dual-era MCP server built on the official v2 server package
// (@modelcontextprotocol/server 2.4.0): serves 2026-07-28 (server/discover,
// per-request _meta, stream close = cancellation) and, through the SDK's own
// fallbacks, 2025-era clients (stateless on HTTP, pinned per connection on stdio).
//
//   node fake-server2026.mjs                                   stdio (serveStdio)
//   node fake-server2026.mjs --http PORT [--response-mode auto|sse|json] [--legacy stateless|reject]
//                                                              createMcpHandler on 127.0.0.1:PORT/mcp
//
// Tools: sleep {seconds, steps} (progress per step, honours cancellation),
// echo {text}, and the conformance suite's test_simple_text,
// test_tool_with_progress, test_error_handling.
//
// Server-side events are JSON lines on stderr ({"server":"call_start"|...}).
// In HTTP mode the first stdout line is {"event":"listening","port":N,"url":"..."}.

import http from 'node:http';
import { Readable } from 'node:stream';

import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import * as z from 'zod';

const argv = process.argv.slice(2);
const flag = (name) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
};
const httpPort = flag('--http') === undefined ? undefined : Number(flag('--http'));
const responseMode = flag('--response-mode');
const legacy = flag('--legacy');

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

function factory({ era }) {
    const server = new McpServer({ name: 'fake-server2026', version: '0.0.0' }, { capabilities: { tools: { listChanged: true } } });

    server.registerTool(
        'sleep',
        {
            description: 'Sleeps `seconds`, reporting progress `steps` times; stops when cancelled.',
            inputSchema: z.object({ seconds: z.number().min(0).default(1), steps: z.number().int().min(1).default(5) })
        },
        async ({ seconds, steps }, ctx) => {
            const req = ctx.mcpReq;
            const token = req._meta?.progressToken;
            log({ server: 'call_start', era, tool: 'sleep', requestId: req.id, progressToken: token, envelope: req.envelope });
            try {
                for (let i = 1; i <= steps; i++) {
                    await abortableSleep((seconds * 1000) / steps, req.signal);
                    if (token !== undefined) {
                        await req.notify({
                            method: 'notifications/progress',
                            params: { progressToken: token, progress: i, total: steps, message: `step ${i}/${steps}` }
                        });
                    }
                }
            } catch (e) {
                log({ server: 'call_cancelled', era, tool: 'sleep', requestId: req.id, reason: String(req.signal.reason ?? e) });
                throw e;
            }
            log({ server: 'call_done', era, tool: 'sleep', requestId: req.id });
            return { content: [{ type: 'text', text: `slept ${seconds}s in ${steps} steps` }] };
        }
    );

    server.registerTool('echo', { description: 'Returns its text argument.', inputSchema: z.object({ text: z.string() }) }, async ({ text }, ctx) => {
        log({ server: 'call_start', era, tool: 'echo', requestId: ctx.mcpReq.id });
        return { content: [{ type: 'text', text }] };
    });

    server.registerTool('test_simple_text', { description: 'Conformance: simple text' }, async () => ({
        content: [{ type: 'text', text: 'This is a simple text response for testing.' }]
    }));

    server.registerTool('test_tool_with_progress', { description: 'Conformance: progress 0/50/100' }, async (ctx) => {
        const token = ctx.mcpReq._meta?.progressToken;
        for (const p of [0, 50, 100]) {
            if (token !== undefined) {
                await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: p, total: 100 } });
            }
            if (p < 100) await abortableSleep(50, ctx.mcpReq.signal);
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
    serveStdio(factory, { onerror: (e) => log({ server: 'error', error: String(e) }) });
    log({ server: 'stdio_ready' });
} else {
    const handler = createMcpHandler(factory, {
        ...(responseMode && { responseMode }),
        ...(legacy && { legacy }),
        onerror: (e) => log({ server: 'error', error: String(e?.message ?? e) })
    });

    // Minimal node:http <-> fetch adapter. The web Request's signal aborts
    // when the client goes away (that is how the handler sees a closed stream).
    const httpServer = http.createServer(async (req, res) => {
        const ac = new AbortController();
        res.on('close', () => {
            if (!res.writableFinished) {
                log({ server: 'http_client_closed', method: req.method });
                ac.abort(new Error('client closed the connection'));
            }
        });
        try {
            const url = new URL(req.url, `http://${req.headers.host ?? 'localhost'}`);
            if (url.pathname !== '/mcp') {
                res.writeHead(404).end();
                return;
            }
            log({ server: 'http', method: req.method, protocolVersion: req.headers['mcp-protocol-version'], mcpMethod: req.headers['mcp-method'], mcpName: req.headers['mcp-name'] });
            const headers = new Headers();
            for (const [k, v] of Object.entries(req.headers)) {
                if (Array.isArray(v)) v.forEach((x) => headers.append(k, x));
                else if (v !== undefined) headers.set(k, v);
            }
            const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
            const request = new Request(url, {
                method: req.method,
                headers,
                ...(hasBody && { body: Readable.toWeb(req), duplex: 'half' }),
                signal: ac.signal
            });
            const response = await handler.fetch(request);
            const outHeaders = {};
            response.headers.forEach((v, k) => (outHeaders[k] = v));
            res.writeHead(response.status, outHeaders);
            if (!response.body) {
                res.end();
                return;
            }
            const reader = response.body.getReader();
            ac.signal.addEventListener('abort', () => reader.cancel(ac.signal.reason).catch(() => {}), { once: true });
            for (;;) {
                const { value, done } = await reader.read();
                if (done) break;
                res.write(value);
            }
            res.end();
        } catch (e) {
            if (!ac.signal.aborted) log({ server: 'http_error', error: String(e) });
            if (!res.headersSent) res.writeHead(500).end();
            else res.end();
        }
    });
    httpServer.listen(httpPort, '127.0.0.1', () => {
        const { port } = httpServer.address();
        process.stdout.write(JSON.stringify({ event: 'listening', port, url: `http://127.0.0.1:${port}/mcp` }) + '\n');
    });
    const stop = () => {
        handler.close().catch(() => {});
        httpServer.close();
        process.exit(0);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
}
