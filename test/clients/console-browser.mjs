#!/usr/bin/env node
// Drives the mcpcancel web console in a real headless Chromium
// (playwright-core, the system's chromium) while a real MCP client
// (@modelcontextprotocol/sdk 1.32.2) runs a long sleep through the gateway:
// the call must appear in flight without a reload, the page's cancel button
// must cancel it, the client must be answered with an error, and the
// operator's decision row must appear without a reload. Then it drives
// more traffic (echoes, sleeps the client cancels, a cancel sent after its
// call completed, a sleep left running), waits until every chart on the
// calls page has drawn data, screenshots the charts, and opens the
// cancelled call's page for its timeline picture. One JSON object per
// line on stdout (see README.md); screenshots go to --shots.

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
const CHARTS = ['in_flight', 'outcomes', 'initiators', 'stop_latency', 'duration', 'workers', 'cancel_lost'];
const running = new AbortController(); // the sleep left running for the charts

// traffic runs calls of every kind the charts show: echoes that complete,
// sleeps the client cancels, an echo cancelled after it completed
// (cancel_lost), and a sleep left running (aborted at the end).
async function traffic(client, callIds) {
    const echo = (text) => client.callTool({ name: 'echo', arguments: { text } }, CallToolResultSchema);
    for (let i = 0; i < 6; i++) await echo(`hi ${i}`);
    for (let i = 0; i < 2; i++) {
        const ac = new AbortController();
        const sleeping = client.callTool({ name: 'sleep', arguments: { seconds: 60, steps: 600 } }, CallToolResultSchema, { signal: ac.signal, onprogress: () => ac.abort('enough') });
        await sleeping.then(() => { throw new Error('a cancelled sleep completed'); }, () => {});
    }
    await echo('late');
    await client.notification({ method: 'notifications/cancelled', params: { requestId: callIds.at(-1), reason: 'too late' } });
    client.callTool({ name: 'sleep', arguments: { seconds: 120, steps: 10 } }, CallToolResultSchema, { signal: running.signal, timeout: 180000 }).catch(() => {});
}

// chartsWithData waits until every chart has drawn data (the stats event
// comes every few seconds) and returns what each drew.
async function chartsWithData(page) {
    await page.waitForFunction((names) => names.every((n) => {
        const fig = document.querySelector(`figure[data-chart="${n}"]`);
        return fig && Number(fig.dataset.total) > 0;
    }) && document.querySelector('figure[data-chart="outcomes"]').dataset.series.includes('cancel_lost'), CHARTS, { timeout: 4 * STEP_MS, polling: 250 });
    return page.$$eval('figure[data-chart]', (figs) => Object.fromEntries(figs.map((f) => [f.dataset.chart, {
        total: Number(f.dataset.total),
        series: f.dataset.series ? f.dataset.series.split(',') : [],
        shapes: f.querySelectorAll('svg .series').length,
    }])));
}
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

    const transport = new StreamableHTTPClientTransport(new URL(opts.mcp));
    const callIds = []; // the JSON-RPC ids of the tools/call requests sent
    const send = transport.send.bind(transport);
    transport.send = (msg, o) => {
        if (msg.method === 'tools/call') callIds.push(msg.id);
        return send(msg, o);
    };
    await client.connect(transport);
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

    await traffic(client, callIds);
    const charts = await chartsWithData(page);
    emit({ event: 'charts', charts, loads });
    await page.locator('#charts').screenshot({ path: path.join(opts.shots, '3-charts.png') });
    await page.screenshot({ path: path.join(opts.shots, '4-calls-page.png'), fullPage: true });

    await page.goto(new URL(`calls/${callId}`, opts.console).href);
    const marks = await page.$$eval('#timeline-picture g.mark', (gs) => gs.map((g) => g.dataset.step));
    emit({ event: 'timeline', call_id: callId, marks });
    await page.locator('main').screenshot({ path: path.join(opts.shots, '5-call-timeline.png') });
    emit({ event: 'done' });
    running.abort();
} catch (e) {
    emit({ event: 'error', error: errorInfo(e) });
    process.exitCode = 1;
} finally {
    await client.close().catch(() => {});
    await browser.close();
}
