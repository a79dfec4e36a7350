#!/usr/bin/env node
// 2026-07-28 MRTR driven by the official TypeScript v2 client
// (@modelcontextprotocol/client 2.4.0), pinned to 2026-07-28. It declares
// sampling, elicitation and roots, and registers the same handlers a 2025
// client would; the SDK fulfils each input_required round through them
// and retries the call with the answers and the requestState.
// One JSON object per line on stdout: {event:"asked", method} for each
// handler run, then {event:"result", result} or {event:"error", ...}.

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { emit, errorInfo, fail, parseArgs } from './lib.mjs';

const USAGE = `usage: node mrtr2026.mjs --url URL --tool NAME [--args JSON]
  --sampling-text TEXT   answer sampling/createMessage with this text
  --elicit-content JSON  accept elicitation/create with this content
  --roots JSON           answer roots/list with these roots`;

const opts = parseArgs(process.argv.slice(2), USAGE);
if (!opts.url || !opts.tool) fail(USAGE);
const client = new Client(
    { name: 'mcpcancel-mrtr2026', version: '0.0.0' },
    {
        capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: false } },
        versionNegotiation: { mode: { pin: '2026-07-28' } }
    }
);
client.setRequestHandler('sampling/createMessage', async () => {
    emit({ event: 'asked', method: 'sampling/createMessage' });
    return { role: 'assistant', model: 'm', content: { type: 'text', text: opts['sampling-text'] ?? '' } };
});
client.setRequestHandler('elicitation/create', async () => {
    emit({ event: 'asked', method: 'elicitation/create' });
    return { action: 'accept', content: JSON.parse(opts['elicit-content'] ?? '{}') };
});
client.setRequestHandler('roots/list', async () => {
    emit({ event: 'asked', method: 'roots/list' });
    return { roots: JSON.parse(opts.roots ?? '[]') };
});

let code = 0;
try {
    await client.connect(new StreamableHTTPClientTransport(new URL(opts.url)));
    emit({ event: 'connected', era: client.getProtocolEra(), protocolVersion: client.getNegotiatedProtocolVersion() });
    const result = await client.callTool({ name: opts.tool, arguments: opts.args ?? {} });
    emit({ event: 'result', result });
} catch (e) {
    emit({ event: 'error', ...errorInfo(e) });
    code = 1;
} finally {
    await client.close().catch(() => {});
}
process.exit(code);
