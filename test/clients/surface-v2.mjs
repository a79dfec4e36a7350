#!/usr/bin/env node
// The MCP surface beyond tools, asked by the official TypeScript client v2
// (@modelcontextprotocol/client 2.4.0), for the Go differential test
// (test/surface): resources/list, resources/templates/list, resources/read,
// prompts/list, prompts/get and completion/complete, each request of a plan
// given as JSON, then (with --subscribe URI) a subscription to URI and the
// first update of it, which server-everything's toggle-subscriber-updates
// tool makes it send. The client negotiates the era (--mode auto, the
// default: server/discover, falling back to initialize; legacy: initialize
// only), and subscribes as its era does: resources/subscribe on a 2025-era
// connection, subscriptions/listen with resourceSubscriptions on 2026-07-28.
// Prints ONE JSON object on stdout: the era, the server's capabilities and
// the answers (or errors) in the plan's order, the subscription's last.

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import { splitCommand } from './lib.mjs';

const USAGE = `usage: node surface-v2.mjs (--url URL | --stdio 'CMD ARGS') --plan JSON [--subscribe URI] [--mode auto|legacy]
  a plan is [{"method": M, "params": P}, ...]; list methods collect every page`;

const args = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const mode = args.mode ?? 'auto';
if (!args.plan || !args.url === !args.stdio || !['auto', 'legacy'].includes(mode)) {
    process.stderr.write(USAGE + '\n');
    process.exit(2);
}

const options = { capabilities: {} };
if (mode === 'auto') options.versionNegotiation = { mode: 'auto' };
const client = new Client({ name: 'mcpcancel-surface-v2', version: '1' }, options);
let transport;
if (args.url) {
    transport = new StreamableHTTPClientTransport(new URL(args.url));
} else {
    const [command, ...rest] = splitCommand(args.stdio);
    transport = new StdioClientTransport({ command, args: rest, env: process.env, stderr: 'inherit' });
}
await client.connect(transport);
const era = client.getProtocolEra();

const lists = {
    'resources/list': ['listResources', 'resources'],
    'resources/templates/list': ['listResourceTemplates', 'resourceTemplates'],
    'prompts/list': ['listPrompts', 'prompts'],
};

async function ask(step) {
    const list = lists[step.method];
    if (list) {
        const [fn, field] = list;
        const all = [];
        let cursor;
        do {
            const page = await client[fn](cursor ? { cursor } : undefined);
            all.push(...page[field]);
            cursor = page.nextCursor;
        } while (cursor);
        return { [field]: all };
    }
    switch (step.method) {
        case 'resources/read': return client.readResource(step.params);
        case 'prompts/get': return client.getPrompt(step.params);
        case 'completion/complete': return client.complete(step.params);
    }
    throw new Error(`unknown method ${step.method}`);
}

// subscribe subscribes to uri as the era does, turns the server's updates
// on, and returns the first update of uri; then turns them off and ends
// the subscription.
async function subscribe(uri) {
    let heard;
    const updated = new Promise((resolve) => { heard = resolve; });
    client.setNotificationHandler('notifications/resources/updated', (n) => {
        if (n.params.uri === uri) heard(n.params.uri);
    });
    let sub;
    let granted;
    if (era === 'modern') {
        sub = await client.listen({ resourceSubscriptions: [uri] });
        granted = sub.honoredFilter.resourceSubscriptions ?? [];
    } else {
        await client.subscribeResource({ uri });
        granted = [uri];
    }
    const toggle = () => client.callTool({ name: 'toggle-subscriber-updates', arguments: {} });
    await toggle();
    let timer;
    const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no update of ${uri} within 20 s`)), 20000); });
    try {
        return { subscribed: granted, updated: await Promise.race([updated, timeout]) };
    } finally {
        clearTimeout(timer);
        await toggle();
        if (sub) await sub.close();
        else await client.unsubscribeResource({ uri });
    }
}

const answers = [];
for (const step of JSON.parse(args.plan)) {
    try {
        answers.push({ method: step.method, result: await ask(step) });
    } catch (e) {
        answers.push({ method: step.method, error: { code: e.code, message: e.message } });
    }
}
if (args.subscribe) {
    try {
        answers.push({ method: 'subscribe', result: await subscribe(args.subscribe) });
    } catch (e) {
        answers.push({ method: 'subscribe', error: { code: e.code, message: e.message } });
    }
}
process.stdout.write(JSON.stringify({ era, capabilities: client.getServerCapabilities(), answers }) + '\n');
await client.close();
