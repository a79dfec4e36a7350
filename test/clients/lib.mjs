// Shared helpers for the MCP test client scripts (call2025.mjs, call2026.mjs).
//
// Contract with the Go tests: stdout carries ONLY JSON objects, one per line.
// Everything else (SDK debug output, child stderr) goes to stderr.

import { format } from 'node:util';

// --- stdout discipline ------------------------------------------------------

// The SDKs call console.debug/console.log in a few places (the v2 client logs
// "listTools() called but server does not advertise tools capability" with
// console.debug, which Node writes to stdout). Route all console output to
// stderr so stdout stays one-JSON-object-per-line.
for (const name of ['log', 'info', 'debug']) {
    console[name] = (...args) => process.stderr.write(format(...args) + '\n');
}

const t0 = Date.now();

/** Emit one event line on stdout. Adds `t` (ms since start). */
export function emit(obj) {
    process.stdout.write(JSON.stringify({ ...obj, t: Date.now() - t0 }) + '\n');
}

// --- argument parsing -------------------------------------------------------

const BOOL_FLAGS = new Set(['help', 'no-list', 'no-wire', 'no-delete', 'list-only', 'list-changed']);

/**
 * Parse `--flag value` / `--flag=value` / boolean flags. Repeated `--header`
 * values are collected into an array.
 */
export function parseArgs(argv, usage) {
    const out = { header: [] };
    for (let i = 0; i < argv.length; i++) {
        let a = argv[i];
        if (!a.startsWith('--')) {
            fail(`unexpected argument ${JSON.stringify(a)}\n${usage}`);
        }
        a = a.slice(2);
        let value;
        const eq = a.indexOf('=');
        if (eq >= 0) {
            value = a.slice(eq + 1);
            a = a.slice(0, eq);
        } else if (BOOL_FLAGS.has(a)) {
            value = true;
        } else {
            if (i + 1 >= argv.length) fail(`--${a} needs a value\n${usage}`);
            value = argv[++i];
        }
        if (a === 'help') {
            process.stderr.write(usage + '\n');
            process.exit(0);
        }
        if (a === 'header') out.header.push(value);
        else out[a] = value;
    }
    if (!out.url === !out.stdio) fail(`exactly one of --url or --stdio is required\n${usage}`);
    if (!out.tool && !out['list-only']) fail(`--tool is required\n${usage}`);
    out.args = out.args === undefined ? {} : parseJSONArg('--args', out.args);
    out.lingerMs = intArg(out, 'linger-ms', 1000);
    out.timeoutMs = intArg(out, 'timeout-ms', 60000);
    out.cancelAfterProgress = intArg(out, 'cancel-after-progress', undefined);
    out.cancelAfterMs = intArg(out, 'cancel-after-ms', undefined);
    out.reason = out.reason ?? 'cancelled by test client';
    out.headers = {};
    for (const h of out.header) {
        const c = h.indexOf(':');
        if (c <= 0) fail(`--header wants NAME:VALUE, got ${JSON.stringify(h)}`);
        out.headers[h.slice(0, c).trim()] = h.slice(c + 1).trim();
    }
    return out;
}

function intArg(o, name, dflt) {
    if (o[name] === undefined) return dflt;
    const n = Number(o[name]);
    if (!Number.isFinite(n) || n < 0) fail(`--${name} wants a non-negative number`);
    return n;
}

function parseJSONArg(flag, s) {
    try {
        return JSON.parse(s);
    } catch (e) {
        fail(`${flag} is not valid JSON: ${e.message}`);
    }
}

export function fail(msg) {
    emit({ event: 'error', phase: 'args', message: msg });
    process.exit(2);
}

/**
 * Split a command line into argv: whitespace-separated, with '...' and "..."
 * quoting and backslash escapes outside single quotes. No globbing, no
 * variable expansion.
 */
export function splitCommand(s) {
    const out = [];
    let cur = '';
    let have = false;
    let q = null;
    for (let i = 0; i < s.length; i++) {
        const c = s[i];
        if (q === "'") {
            if (c === "'") q = null;
            else cur += c;
        } else if (q === '"') {
            if (c === '"') q = null;
            else if (c === '\\' && i + 1 < s.length) cur += s[++i];
            else cur += c;
        } else if (c === "'" || c === '"') {
            q = c;
            have = true;
        } else if (c === '\\' && i + 1 < s.length) {
            cur += s[++i];
            have = true;
        } else if (/\s/.test(c)) {
            if (have) out.push(cur);
            cur = '';
            have = false;
        } else {
            cur += c;
            have = true;
        }
    }
    if (q) fail(`unterminated quote in --stdio command`);
    if (have) out.push(cur);
    if (out.length === 0) fail('--stdio command is empty');
    return out;
}

// --- wire tap ---------------------------------------------------------------

function tryParse(s) {
    try {
        return JSON.parse(s);
    } catch {
        return s;
    }
}

/**
 * Tracks the tools/call request (id, progress token) as seen on the wire and
 * collects every inbound message for it that arrives after the client
 * cancelled. This is what the SDKs hide: they drop late responses.
 */
export class CallTracker {
    constructor() {
        this.callId = undefined; // JSON-RPC id of the tools/call request
        this.progressToken = undefined;
        this.cancelledAt = undefined; // Date.now() when the client cancelled
        this.late = [];
    }
    noteOut(msg) {
        if (msg && typeof msg === 'object' && msg.method === 'tools/call' && msg.id !== undefined) {
            this.callId = msg.id;
            this.progressToken = msg.params?._meta?.progressToken;
        }
    }
    noteIn(msg, where) {
        if (this.cancelledAt === undefined || !msg || typeof msg !== 'object') return;
        const isResponse = ('result' in msg || 'error' in msg) && msg.id !== undefined && msg.id === this.callId;
        const isProgress =
            msg.method === 'notifications/progress' &&
            this.progressToken !== undefined &&
            msg.params?.progressToken === this.progressToken;
        if (isResponse || isProgress) {
            const late = { kind: isResponse ? 'response' : 'progress', msAfterCancel: Date.now() - this.cancelledAt, where, message: msg };
            this.late.push(late);
            emit({ event: 'late', ...late });
        }
    }
    markCancelled() {
        this.cancelledAt = Date.now();
    }
}

const INTERESTING_RESPONSE_HEADERS = ['content-type', 'mcp-session-id', 'mcp-protocol-version', 'allow', 'www-authenticate'];

/**
 * A fetch that logs every HTTP exchange on the wire:
 *   {"event":"wire","dir":"out","http":N,"method":"POST","headers":{...},"data":<body>}
 *   {"event":"wire","dir":"in","http":N,"status":200,"headers":{...}}
 *   {"event":"wire","dir":"in","http":N,"sse":{"id":..,"event":..},"data":<json>}   one per SSE event
 *   {"event":"wire","dir":"in","http":N,"data":<json>}                               JSON body
 *   {"event":"wire","dir":"in","http":N,"end":"eof"|"aborted"|"error", ...}          stream end
 * The response body is tee'd: the logging branch reads independently of the
 * SDK, so messages the SDK ignores (late responses after a cancel) are still
 * logged. `extraHeaders` are added to every request.
 */
export function makeWireFetch({ enabled = true, tracker, extraHeaders = {} } = {}) {
    let seq = 0;
    return async function wireFetch(input, init = {}) {
        const n = ++seq;
        const headers = new Headers(init.headers);
        for (const [k, v] of Object.entries(extraHeaders)) headers.set(k, v);
        init = { ...init, headers };
        const method = (init.method ?? 'GET').toUpperCase();
        let bodyObj;
        if (typeof init.body === 'string') {
            bodyObj = tryParse(init.body);
            tracker?.noteOut(bodyObj);
        }
        if (enabled) {
            emit({ event: 'wire', dir: 'out', http: n, method, headers: Object.fromEntries(headers), ...(bodyObj !== undefined && { data: bodyObj }) });
        }
        let res;
        try {
            res = await fetch(input, init);
        } catch (e) {
            if (enabled) emit({ event: 'wire', dir: 'in', http: n, end: init.signal?.aborted ? 'aborted' : 'error', error: String(e?.cause ?? e) });
            throw e;
        }
        const rh = {};
        for (const k of INTERESTING_RESPONSE_HEADERS) {
            const v = res.headers.get(k);
            if (v !== null) rh[k] = v;
        }
        if (enabled) emit({ event: 'wire', dir: 'in', http: n, status: res.status, headers: rh });
        if (!res.body) return res;
        const [forSdk, forLog] = res.body.tee();
        const isSSE = (res.headers.get('content-type') ?? '').toLowerCase().startsWith('text/event-stream');
        logBody(forLog, { n, isSSE, enabled, tracker, signal: init.signal });
        const nullBody = [101, 204, 205, 304].includes(res.status);
        return new Response(nullBody ? null : forSdk, { status: res.status, statusText: res.statusText, headers: res.headers });
    };
}

async function logBody(stream, { n, isSSE, enabled, tracker, signal }) {
    const where = `http:${n}`;
    const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = { data: [], id: undefined, event: undefined };
    const flushEvent = () => {
        if (ev.data.length > 0) {
            const data = tryParse(ev.data.join('\n'));
            const sse = {};
            if (ev.id !== undefined) sse.id = ev.id;
            if (ev.event !== undefined) sse.event = ev.event;
            if (enabled) emit({ event: 'wire', dir: 'in', http: n, sse, data });
            tracker?.noteIn(data, where);
        } else if (ev.id !== undefined && enabled) {
            emit({ event: 'wire', dir: 'in', http: n, sse: { id: ev.id, ...(ev.event !== undefined && { event: ev.event }) }, data: null });
        }
        ev = { data: [], id: undefined, event: undefined };
    };
    const sseLine = (line) => {
        if (line === '') return flushEvent();
        if (line.startsWith(':')) return; // comment / keep-alive
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let value = c < 0 ? '' : line.slice(c + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'data') ev.data.push(value);
        else if (field === 'id') ev.id = value;
        else if (field === 'event') ev.event = value;
        else if (field === 'retry' && enabled) emit({ event: 'wire', dir: 'in', http: n, sse: { retry: Number(value) } });
    };
    try {
        for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value;
            if (isSSE) {
                let i;
                while ((i = buf.search(/\r\n|\r|\n/)) >= 0) {
                    const sep = buf[i] === '\r' && buf[i + 1] === '\n' ? 2 : 1;
                    sseLine(buf.slice(0, i));
                    buf = buf.slice(i + sep);
                }
            }
        }
        if (isSSE) {
            if (buf !== '') sseLine(buf);
            flushEvent();
        } else if (buf !== '') {
            const data = tryParse(buf);
            if (enabled) emit({ event: 'wire', dir: 'in', http: n, data });
            if (Array.isArray(data)) data.forEach((m) => tracker?.noteIn(m, where));
            else tracker?.noteIn(data, where);
        }
        if (enabled) emit({ event: 'wire', dir: 'in', http: n, end: 'eof' });
    } catch (e) {
        if (enabled) emit({ event: 'wire', dir: 'in', http: n, end: signal?.aborted ? 'aborted' : 'error', error: String(e?.name ?? e) });
    }
}

/**
 * Patch a StdioClientTransport class (v1 or v2 SDK) so that every line the
 * child writes to stdout and every message written to its stdin is logged:
 *   {"event":"wire","dir":"out","stdio":PID,"data":<msg>}
 *   {"event":"wire","dir":"in","stdio":PID,"data":<msg>}
 *   {"event":"wire","dir":"in","stdio":PID,"end":"eof"}
 * The prototype is patched in place (not subclassed): the v2 client only runs
 * its server/discover probe on a disposable sibling process when the
 * transport is exactly the SDK's class, and patching keeps that behaviour. The
 * sibling's traffic is logged too (it has its own PID).
 */
export function tapStdioTransport(TransportClass, { enabled = true, tracker } = {}) {
    const proto = TransportClass.prototype;
    if (proto.__wireTapped) return;
    proto.__wireTapped = true;
    const origStart = proto.start;
    const origSend = proto.send;
    proto.start = async function (...a) {
        await origStart.apply(this, a);
        const pid = this._process?.pid;
        const stdout = this._process?.stdout;
        if (!stdout) return;
        let buf = '';
        stdout.on('data', (chunk) => {
            buf += chunk.toString('utf8');
            let i;
            while ((i = buf.indexOf('\n')) >= 0) {
                const line = buf.slice(0, i).replace(/\r$/, '');
                buf = buf.slice(i + 1);
                if (line === '') continue;
                const data = tryParse(line);
                if (enabled) emit({ event: 'wire', dir: 'in', stdio: pid, data });
                tracker?.noteIn(data, `stdio:${pid}`);
            }
        });
        stdout.on('end', () => {
            if (enabled) emit({ event: 'wire', dir: 'in', stdio: pid, end: 'eof' });
        });
    };
    proto.send = function (message, ...rest) {
        tracker?.noteOut(message);
        if (enabled) emit({ event: 'wire', dir: 'out', stdio: this._process?.pid ?? null, data: message });
        return origSend.call(this, message, ...rest);
    };
}

export function errorInfo(e) {
    const o = { message: e?.message ?? String(e) };
    if (e && typeof e === 'object') {
        if (e.code !== undefined) o.code = e.code;
        if (e.data !== undefined) o.data = e.data;
        if (e.name && e.name !== 'Error') o.name = e.name;
    }
    return o;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
