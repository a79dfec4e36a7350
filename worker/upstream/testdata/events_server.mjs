// A fronted MCP server that offers the events extension (SEP-3415,
// io.modelcontextprotocol/events), on the official TypeScript SDK v1's
// low-level Server, over stdio or Streamable HTTP.
//
//   node events_server.mjs NODE_MODULES          stdio
//   node events_server.mjs NODE_MODULES --http   StreamableHTTPServerTransport
//                                                (a session each) on 127.0.0.1,
//                                                port 0; prints {"url":...}
//
// Every session shares the state of the held streams, so a tool call of
// one session learns of a stream cancelled on another.
//
// It declares the extension in its capabilities and answers:
//   - events/list in two pages: "ticks" (poll, push, webhook) and
//     "hooks" (webhook only), then "polled" (poll);
//   - events/poll: three occurrences of the named event, a cursor, and a
//     vendor field and _meta that a gateway must pass whole;
//   - events/stream {name, arguments: {n, gap, terminate, hold, key}}:
//     notifications/events/active, then n notifications/events/event
//     (eventId e1..en) in order, a fresh active with truncated after the
//     gap'th, and with terminate notifications/events/terminated, each
//     with the request's id as _meta's subscription id; then, unless
//     hold, its result; with hold, it waits until the request is cancelled
//     and records that (key);
//   - the tool await_cancelled {key}: answers once a held stream of that
//     key was cancelled, so a test learns it from the server itself;
//   - the tool stream_ids {key}: the request ids of the streams of that key.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const nm = process.argv[2];
const load = (p) => import(pathToFileURL(join(nm, p)).href);
const { Server } = await load('@modelcontextprotocol/sdk/dist/esm/server/index.js');
const { StdioServerTransport } = await load('@modelcontextprotocol/sdk/dist/esm/server/stdio.js');
const { StreamableHTTPServerTransport } = await load('@modelcontextprotocol/sdk/dist/esm/server/streamableHttp.js');
const { CallToolRequestSchema, ListToolsRequestSchema } = await load('@modelcontextprotocol/sdk/dist/esm/types.js');
const z = await load('zod/v4/index.js');

const EXT = 'io.modelcontextprotocol/events';
const SUB = 'io.modelcontextprotocol/subscriptionId';

const request = (method) => z.object({ method: z.literal(method), params: z.any().optional() });

const page1 = [
  {
    name: 'ticks', description: 'a tick', delivery: ['poll', 'push', 'webhook'],
    inputSchema: { type: 'object', properties: { n: { type: 'integer' } } },
    payloadSchema: { type: 'object', properties: { i: { type: 'integer' } } },
    _meta: { 'com.example/fixture': { kept: true } },
  },
  { name: 'hooks', description: 'webhook only', delivery: ['webhook'], inputSchema: { type: 'object' }, payloadSchema: { type: 'object' } },
];
const page2 = [{ name: 'polled', description: 'poll only', delivery: ['poll'], inputSchema: { type: 'object' }, payloadSchema: { type: 'object' } }];

const occurrence = (name, i, cursor) => ({
  eventId: `e${i}`, name, timestamp: `2026-12-05T00:00:0${i % 10}Z`, data: { i }, cursor,
});

const cancelled = new Map(); // key -> resolve of its waiters, once cancelled
const waiters = new Map(); // key -> [resolve]
const ids = new Map(); // key -> [request id]

function markCancelled(key) {
  cancelled.set(key, true);
  for (const w of waiters.get(key) ?? []) w();
  waiters.delete(key);
}

function newServer() {
  const server = new Server(
    { name: 'events-fixture', version: '1.0.0' },
    { capabilities: { tools: {}, extensions: { [EXT]: {} } } },
  );

  server.setRequestHandler(request('events/list'), async (req) => {
    if (req.params?.cursor === 'page2') return { events: page2 };
    return { events: page1, nextCursor: 'page2' };
  });

  server.setRequestHandler(request('events/poll'), async (req) => {
    const name = req.params?.name;
    if (name !== 'ticks' && name !== 'polled') {
      throw Object.assign(new Error('NotFound'), { code: -32023, data: { kind: 'event' } });
    }
    return {
      resultType: 'complete',
      events: [1, 2, 3].map((i) => occurrence(name, i)),
      cursor: 'c3', truncated: false, hasMore: false, nextPollMs: 30000,
      'com.example/vendor': { polledWith: req.params?.cursor ?? null },
      _meta: { 'com.example/fixture': 'poll' },
    };
  });

  server.setRequestHandler(request('events/stream'), async (req, extra) => {
    const args = req.params?.arguments ?? {};
    const key = args.key ?? '';
    ids.set(key, [...(ids.get(key) ?? []), extra.requestId]);
    const meta = { [SUB]: extra.requestId };
    await extra.sendNotification({ method: 'notifications/events/active', params: { cursor: 'c0', truncated: false, _meta: meta } });
    for (let i = 1; i <= (args.n ?? 0); i++) {
      await extra.sendNotification({ method: 'notifications/events/event', params: { ...occurrence(req.params.name, i, `c${i}`), _meta: meta } });
      if (i === args.gap) {
        await extra.sendNotification({ method: 'notifications/events/active', params: { cursor: 'gap', truncated: true, _meta: meta } });
      }
    }
    if (args.terminate) {
      await extra.sendNotification({ method: 'notifications/events/terminated', params: { error: { code: -32024, message: 'Forbidden', data: { reason: 'Access revoked' } }, _meta: meta } });
    }
    if (!args.hold) return { resultType: 'complete', _meta: meta };
    await new Promise((resolve) => {
      if (extra.signal.aborted) return resolve();
      extra.signal.addEventListener('abort', resolve, { once: true });
    });
    markCancelled(key);
    return { resultType: 'complete', _meta: meta };
  });

  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [
      { name: 'await_cancelled', description: 'answers once a held stream of key was cancelled', inputSchema: { type: 'object', properties: { key: { type: 'string' } } } },
      { name: 'stream_ids', description: 'the request ids of the streams of key', inputSchema: { type: 'object', properties: { key: { type: 'string' } } } },
    ],
  }));

  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const key = req.params.arguments?.key ?? '';
    if (req.params.name === 'stream_ids') {
      return { content: [{ type: 'text', text: JSON.stringify(ids.get(key) ?? []) }] };
    }
    if (!cancelled.get(key)) {
      await new Promise((resolve) => waiters.set(key, [...(waiters.get(key) ?? []), resolve]));
    }
    return { content: [{ type: 'text', text: `cancelled ${key}` }] };
  });
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
