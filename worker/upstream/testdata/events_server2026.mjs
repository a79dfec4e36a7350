// The events server of events_fixture.mjs on the official TypeScript SDK
// v2 (@modelcontextprotocol/server), serving 2026-07-28 over Streamable
// HTTP with createMcpHandler: no session, and a request's stream closed
// is its cancel.
//
//   node events_server2026.mjs NODE_MODULES   on 127.0.0.1 port 0; prints {"url":URL}
import { createServer } from 'node:http';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';

import * as fixture from './events_fixture.mjs';

const nm = process.argv[2];
const load = (p) => import(pathToFileURL(join(nm, p)).href);
const { createMcpHandler, McpServer } = await load('@modelcontextprotocol/server/dist/index.mjs');
const z = await load('zod/v4/index.js');

function factory() {
  const server = new McpServer(
    { name: 'events-fixture-2026', version: '1.0.0' },
    { capabilities: { tools: {}, extensions: { [fixture.EXT]: {} } } },
  );
  const params = { params: z.looseObject({}) };
  server.server.setRequestHandler('events/list', params, async (p) => fixture.list(p));
  server.server.setRequestHandler('events/poll', params, async (p) => fixture.poll(p));
  server.server.setRequestHandler('events/stream', params, async (p, ctx) =>
    fixture.stream(p, { id: ctx.mcpReq.id, notify: (n) => ctx.mcpReq.notify(n), signal: ctx.mcpReq.signal }));
  for (const t of fixture.tools) {
    server.registerTool(t.name, { description: t.description, inputSchema: z.object({ key: z.string().optional() }) },
      async (args) => fixture.callTool(t.name, args));
  }
  return server;
}

const handler = createMcpHandler(factory, { onerror: (e) => process.stderr.write(`events_server2026: ${e?.message ?? e}\n`) });

// node:http to fetch: the web Request's signal aborts when the client
// goes away, which is how the handler sees a request's stream closed.
const httpServer = createServer(async (req, res) => {
  const ac = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) ac.abort(new Error('the client closed the stream'));
  });
  try {
    const url = new URL(req.url, `http://${req.headers.host ?? 'localhost'}`);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      if (Array.isArray(v)) v.forEach((x) => headers.append(k, x));
      else if (v !== undefined) headers.set(k, v);
    }
    const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
    const request = new Request(url, {
      method: req.method, headers, signal: ac.signal,
      ...(hasBody && { body: Readable.toWeb(req), duplex: 'half' }),
    });
    const response = await handler.fetch(request);
    const out = {};
    response.headers.forEach((v, k) => (out[k] = v));
    res.writeHead(response.status, out);
    if (!response.body) return void res.end();
    const reader = response.body.getReader();
    ac.signal.addEventListener('abort', () => reader.cancel(ac.signal.reason).catch(() => {}), { once: true });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      res.write(value);
    }
    res.end();
  } catch (e) {
    if (!ac.signal.aborted) process.stderr.write(`events_server2026: ${e}\n`);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  }
});
httpServer.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${httpServer.address().port}/mcp` }) + '\n');
});
