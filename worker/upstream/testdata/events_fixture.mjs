// The events server's behaviour, for the fixtures on either TypeScript
// SDK (events_server.mjs on v1, events_server2026.mjs on v2). Its state
// (the held streams) is one per process, shared by every session.
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

export const EXT = 'io.modelcontextprotocol/events';
const SUB = 'io.modelcontextprotocol/subscriptionId';

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

export function list(params) {
  if (params?.cursor === 'page2') return { events: page2 };
  return { events: page1, nextCursor: 'page2' };
}

const occurrence = (name, i, cursor) => ({
  eventId: `e${i}`, name, timestamp: `2026-12-05T00:00:0${i % 10}Z`, data: { i }, cursor,
});

// poll answers events/poll; an unknown name throws the extension's NotFound.
export function poll(params) {
  const name = params?.name;
  if (name !== 'ticks' && name !== 'polled') {
    throw Object.assign(new Error('NotFound'), { code: -32023, data: { kind: 'event' } });
  }
  return {
    resultType: 'complete',
    events: [1, 2, 3].map((i) => occurrence(name, i)),
    cursor: 'c3', truncated: false, hasMore: false, nextPollMs: 30000,
    'com.example/vendor': { polledWith: params?.cursor ?? null },
    _meta: { 'com.example/fixture': 'poll' },
  };
}

const cancelled = new Map(); // key -> true, once cancelled
const waiters = new Map(); // key -> [resolve]
const ids = new Map(); // key -> [request id]

function markCancelled(key) {
  cancelled.set(key, true);
  for (const w of waiters.get(key) ?? []) w();
  waiters.delete(key);
}

// stream answers events/stream: req is {id, notify, signal} of the request.
export async function stream(params, req) {
  const args = params?.arguments ?? {};
  const key = args.key ?? '';
  ids.set(key, [...(ids.get(key) ?? []), req.id]);
  const meta = { [SUB]: req.id };
  await req.notify({ method: 'notifications/events/active', params: { cursor: 'c0', truncated: false, _meta: meta } });
  for (let i = 1; i <= (args.n ?? 0); i++) {
    await req.notify({ method: 'notifications/events/event', params: { ...occurrence(params.name, i, `c${i}`), _meta: meta } });
    if (i === args.gap) {
      await req.notify({ method: 'notifications/events/active', params: { cursor: 'gap', truncated: true, _meta: meta } });
    }
  }
  if (args.terminate) {
    await req.notify({ method: 'notifications/events/terminated', params: { error: { code: -32024, message: 'Forbidden', data: { reason: 'Access revoked' } }, _meta: meta } });
  }
  if (!args.hold) return { resultType: 'complete', _meta: meta };
  await new Promise((resolve) => {
    if (req.signal.aborted) return resolve();
    req.signal.addEventListener('abort', resolve, { once: true });
  });
  markCancelled(key);
  return { resultType: 'complete', _meta: meta };
}

export const tools = [
  { name: 'await_cancelled', description: 'answers once a held stream of key was cancelled', inputSchema: { type: 'object', properties: { key: { type: 'string' } } } },
  { name: 'stream_ids', description: 'the request ids of the streams of key', inputSchema: { type: 'object', properties: { key: { type: 'string' } } } },
];

export async function callTool(name, args) {
  const key = args?.key ?? '';
  if (name === 'stream_ids') {
    return { content: [{ type: 'text', text: JSON.stringify(ids.get(key) ?? []) }] };
  }
  if (!cancelled.get(key)) {
    await new Promise((resolve) => waiters.set(key, [...(waiters.get(key) ?? []), resolve]));
  }
  return { content: [{ type: 'text', text: `cancelled ${key}` }] };
}
