#!/usr/bin/env node
// The MCP surface beyond tools, asked by the official TypeScript client v1
// (@modelcontextprotocol/sdk 1.32.2): resources/list, resources/templates/list,
// resources/read, prompts/list, prompts/get and completion/complete, each
// request of a plan given as JSON. Prints ONE JSON object on stdout: the
// answers (or errors) in the plan's order, for the Go differential test
// (test/surface) to compare across servers.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { splitCommand } from './lib.mjs';

const USAGE = `usage: node surface2025.mjs (--url URL | --stdio 'CMD ARGS') --plan JSON
  a plan is [{"method": M, "params": P}, ...]; list methods collect every page`;

const args = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
if (!args.plan || !args.url === !args.stdio) {
    process.stderr.write(USAGE + '\n');
    process.exit(2);
}

const client = new Client({ name: 'mcpcancel-surface', version: '1' }, { capabilities: {} });
let transport;
if (args.url) {
    transport = new StreamableHTTPClientTransport(new URL(args.url));
} else {
    const [command, ...rest] = splitCommand(args.stdio);
    transport = new StdioClientTransport({ command, args: rest, env: process.env, stderr: 'inherit' });
}
await client.connect(transport);

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

const answers = [];
for (const step of JSON.parse(args.plan)) {
    try {
        answers.push({ method: step.method, result: await ask(step) });
    } catch (e) {
        answers.push({ method: step.method, error: { code: e.code, message: e.message } });
    }
}
process.stdout.write(JSON.stringify({ capabilities: client.getServerCapabilities(), answers }) + '\n');
await client.close();
