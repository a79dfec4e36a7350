// A fronted MCP server that offers the events extension (SEP-3415,
// io.modelcontextprotocol/events), on the official TypeScript SDK v1's
// low-level Server (a 2025-era server), over stdio or Streamable HTTP;
// what it answers is in events_fixture.mjs.
//
//   node events_server.mjs NODE_MODULES          stdio
//   node events_server.mjs NODE_MODULES --http   StreamableHTTPServerTransport,
//                                                a session each, on 127.0.0.1
//                                                port 0; prints {"url":URL}
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import * as fixture from './events_fixture.mjs';

const nm = process.argv[2];
const load = (p) => import(pathToFileURL(join(nm, p)).href);
const { Server } = await load('@modelcontextprotocol/sdk/dist/esm/server/index.js');
const { StdioServerTransport } = await load('@modelcontextprotocol/sdk/dist/esm/server/stdio.js');
const { StreamableHTTPServerTransport } = await load('@modelcontextprotocol/sdk/dist/esm/server/streamableHttp.js');
const { CallToolRequestSchema, ListToolsRequestSchema } = await load('@modelcontextprotocol/sdk/dist/esm/types.js');
const z = await load('zod/v4/index.js');

const request = (method) => z.object({ method: z.literal(method), params: z.any().optional() });

function newServer() {
  const server = new Server(
    { name: 'events-fixture', version: '1.0.0' },
    { capabilities: { tools: {}, extensions: { [fixture.EXT]: {} } } },
  );
  server.setRequestHandler(request('events/list'), async (req) => fixture.list(req.params));
  server.setRequestHandler(request('events/poll'), async (req) => fixture.poll(req.params));
  server.setRequestHandler(request('events/stream'), async (req, extra) =>
    fixture.stream(req.params, { id: extra.requestId, notify: (n) => extra.sendNotification(n), signal: extra.signal }));
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: fixture.tools }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => fixture.callTool(req.params.name, req.params.arguments));
  return server;
}

if (process.argv[3] !== '--http') {
  await newServer().connect(new StdioServerTransport());
} else {
  const transports = new Map(); // session id -> transport
  const httpServer = createServer(async (req, res) => {
    const sid = req.headers['mcp-session-id'];
    if (sid !== undefined) {
      const t = transports.get(sid);
      if (!t) {
        res.writeHead(404).end();
        return;
      }
      await t.handleRequest(req, res);
      return;
    }
    let body = '';
    for await (const chunk of req) body += chunk;
    const msg = body ? JSON.parse(body) : undefined;
    if (req.method !== 'POST' || msg?.method !== 'initialize') {
      // A 2025-era server: no server/discover, no request without a session.
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: msg?.id ?? null, error: { code: -32000, message: 'Bad Request: no session' } }));
      return;
    }
    const t = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => transports.set(id, t),
    });
    t.onclose = () => transports.delete(t.sessionId);
    await newServer().connect(t);
    await t.handleRequest(req, res, msg);
  });
  httpServer.listen(0, '127.0.0.1', () => {
    process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${httpServer.address().port}/mcp` }) + '\n');
  });
}
