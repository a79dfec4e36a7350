// The official TypeScript SDK's OAuth support, unattended: a client with
// the SDK's ClientCredentialsProvider connects to a protected MCP server,
// and on the 401 the SDK itself reads the challenge, fetches the protected
// resource metadata, discovers the authorization server, gets a token
// with client credentials, and retries. Then it calls one tool.
//
//   node oauth-client-credentials.mjs URL ISSUER CLIENT_ID CLIENT_SECRET SCOPE TOOL
//
// SCOPE is the client's configured scope: in SDK 1.32 a client-credentials
// client asks for that scope, not the one a challenge names (the spec lets
// such clients abort instead of stepping up).
//
// Events (JSON lines on stdout): {"event":"http",...} for every HTTP
// request the SDK made (method, url, status, whether it carried a bearer
// token), then {"event":"result","result":...} or {"event":"error",...}.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { emit } from './lib.mjs';

const [url, issuer, clientId, clientSecret, scope, tool] = process.argv.slice(2);
if (!tool) {
    process.stderr.write('usage: node oauth-client-credentials.mjs URL ISSUER CLIENT_ID CLIENT_SECRET SCOPE TOOL\n');
    process.exit(2);
}

async function loggingFetch(input, init) {
    const req = new Request(input, init);
    const resp = await fetch(req);
    emit({
        event: 'http', method: req.method, url: req.url, status: resp.status,
        bearer: (req.headers.get('authorization') ?? '').startsWith('Bearer '),
        challenge: resp.headers.get('www-authenticate') ?? undefined,
    });
    return resp;
}

const authProvider = new ClientCredentialsProvider({ clientId, clientSecret, scope, expectedIssuer: issuer });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider, fetch: loggingFetch });
const client = new Client({ name: 'oauth-client-credentials', version: '1.0.0' });
try {
    await client.connect(transport);
    const result = await client.callTool({ name: tool, arguments: {} });
    emit({ event: 'result', result });
    await transport.terminateSession().catch(() => {});
} catch (err) {
    emit({ event: 'error', message: String(err?.stack ?? err) });
    process.exitCode = 1;
} finally {
    await client.close().catch(() => {}); // ends the GET stream, so node exits
}
