#!/usr/bin/env node
// Drives the mcpcancel web console in a real headless Chromium
// (playwright-core, the system's chromium) while a real MCP client
// (@modelcontextprotocol/sdk 1.32.2) runs a long sleep through the gateway:
// the call must appear in flight without a reload, the page's cancel button
// must cancel it, the client must be answered with an error, and the
// operator's decision row must appear without a reload. One JSON object
// per line on stdout (see README.md); screenshots go to --shots.

import { chromium } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import path from 'node:path';

import { emit, errorInfo } from './lib.mjs';

const USAGE = 'usage: node console-browser.mjs --console URL --mcp URL --shots DIR [--chromium PATH]';

function flags(argv) {
    const out = {};
    for (let i = 0; i < argv.length; i += 2) {
        if (!argv[i].startsWith('--') || i + 1 >= argv.length) {
            process.stderr.write(USAGE + '\n');
            process.exit(2);
        }
        out[argv[i].slice(2)] = argv[i + 1];
    }
    for (const k of ['console', 'mcp', 'shots']) {
        if (!out[k]) {
            process.stderr.write(`--${k} is required\n${USAGE}\n`);
            process.exit(2);
        }
    }
    return out;
}

const opts = flags(process.argv.slice(2));
const STEP_MS = 20000; // each wait; the Go test bounds the whole run

const browser = await chromium.launch({
    executablePath: opts.chromium || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--headless=new'],
});
const client = new Client({ name: 'console-browser-test', version: '1' });
try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
    page.on('console', (m) => process.stderr.write(`page console: ${m.text()}\n`));
    page.on('pageerror', (e) => emit({ event: 'page_error', message: String(e) }));
    let loads = 0;
    page.on('load', () => { loads++; });
    await page.goto(opts.console);
    await page.waitForSelector('#live.on', { timeout: STEP_MS }); // the event stream is open
    emit({ event: 'console_open', title: await page.title() });

    await client.connect(new StreamableHTTPClientTransport(new URL(opts.mcp)));
    const call = client.callTool({ name: 'sleep', arguments: { seconds: 120, steps: 1200 } }, CallToolResultSchema, { timeout: 60000 })
        .then((result) => ({ result }), (error) => ({ error }));

    const row = await page.waitForSelector('#calls tbody tr[data-call]', { timeout: STEP_MS });
    const callId = await row.getAttribute('data-call');
    const cells = await row.$$eval('td', (tds) => tds.map((td) => td.textContent.trim()));
    emit({ event: 'in_flight', call_id: callId, cells, loads });
    await page.screenshot({ path: path.join(opts.shots, '1-in-flight.png'), fullPage: true });

    await page.click(`button[data-cancel="${callId}"]`);
    const answer = await call;
    if (answer.error) {
        emit({ event: 'client_answer', error: errorInfo(answer.error) });
    } else {
        const text = (answer.result.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
        emit({ event: 'client_answer', is_error: answer.result.isError === true, text });
    }

    const decision = await page.waitForSelector(`#decisions tbody tr[data-decision="${callId}-cancelled"]`, { timeout: STEP_MS });
    await page.waitForSelector(`#call-${callId}`, { state: 'detached', timeout: STEP_MS });
    emit({
        event: 'decided',
        initiator: await decision.getAttribute('data-initiator'),
        cells: await decision.$$eval('td', (tds) => tds.map((td) => td.textContent.trim())),
        button: await page.evaluate(() => document.querySelector('button[data-cancel]')?.textContent ?? null),
        loads,
    });
    await page.screenshot({ path: path.join(opts.shots, '2-decided.png'), fullPage: true });
    emit({ event: 'done' });
} catch (e) {
    emit({ event: 'error', error: errorInfo(e) });
    process.exitCode = 1;
} finally {
    await client.close().catch(() => {});
    await browser.close();
}
