// An OpenID Connect identity provider for the single sign-on tests (docs/sso.md#tests): panva's
// oidc-provider on 127.0.0.1, a free port (or $PORT). Usage: node provider.mjs STATE.json
//
// STATE.json is read again on every request, so a test changes users while it runs:
//   { "clients": [{ "client_id", "client_secret", "redirect_uris": [...] }],
//     "accounts": { "<sub>": { "email", "email_verified", "groups": [...], "disabled"?: true } },
//     "idTokenTtl"?: seconds, "conformIdTokenClaims"?: true (email and groups at userinfo only),
//     "tamper"?: "forge" | "none" | "replay" | "huge" }
// "tamper" makes it a hostile provider at its token endpoint: "forge" names another person
// ("forgeSub") in the id_token and keeps the signature, "none" strips the signature (alg none),
// "replay" answers the id_token it issued for the previous sign-in, "huge" pads the token
// answer to 2 MiB.
// It prints one line, {"issuer": "http://127.0.0.1:<port>"}, once it listens, and writes how far
// its start got to stderr. Sign-in uses the provider's development pages (any password; the
// login is the account's sub) and skips consent: the grant is made at once. Tokens are signed
// (RS256) with a key made at each start.
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import Provider from 'oidc-provider';

// How far a start got, for the tests' report when one never says it listens.
const stage = (name) => process.stderr.write(`${new Date().toISOString()} ${name}\n`);
stage('modules loaded');
const statePath = process.argv[2];
const state = () => JSON.parse(readFileSync(statePath, 'utf8'));

const server = createServer();
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  stage('listening');
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  const initial = state();
  // A signing key of its own each start: a restart on the same port is a key rotation.
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
  stage('signing key made');
  const provider = new Provider(issuer, {
    jwks: { keys: [jwk] },
    clients: initial.clients.map((c) => ({ ...c, grant_types: ['authorization_code'], response_types: ['code'] })),
    pkce: { required: () => true },
    scopes: ['openid', 'email', 'profile', 'groups'],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
    // false: scope claims (email, groups) in the id_token too; true: at userinfo only.
    conformIdTokenClaims: initial.conformIdTokenClaims ?? false,
    ttl: { IdToken: initial.idTokenTtl ?? 3600, AccessToken: 3600, Session: 3600, Interaction: 600, Grant: 3600 },
    cookies: { keys: ['custodian-sso-tests'] },
    async findAccount(ctx, sub) {
      const account = state().accounts[sub];
      if (!account || account.disabled) return undefined;
      return {
        accountId: sub,
        async claims() {
          return { sub, email: account.email, email_verified: account.email_verified, groups: account.groups ?? [] };
        },
      };
    },
    async loadExistingGrant(ctx) {
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
      grant.addOIDCScope('openid email profile groups');
      grant.addOIDCClaims(['email', 'email_verified', 'groups']);
      await grant.save();
      return grant;
    },
  });
  // A login for an account that does not exist or is disabled is refused at the login page.
  provider.use(async (ctx, next) => {
    if (ctx.method === 'POST' && ctx.path.startsWith('/interaction/')) {
      const body = await new Promise((resolve) => {
        let data = '';
        ctx.req.on('data', (chunk) => { data += chunk; });
        ctx.req.on('end', () => resolve(data));
      });
      const fields = new URLSearchParams(body);
      const account = state().accounts[fields.get('login') ?? ''];
      if (fields.get('prompt') === 'login' && (!account || account.disabled)) {
        ctx.status = 403;
        ctx.body = 'no such account, or it is disabled';
        return;
      }
      // Handed on as the provider's body parser expects it.
      ctx.req.body = Object.fromEntries(fields);
    }
    await next();
  });
  // The hostile token endpoint: the id_token the provider made, changed as "tamper" says.
  let previous;
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.path !== '/token' || typeof ctx.body?.id_token !== 'string') return;
    const issued = ctx.body.id_token;
    const { tamper, forgeSub } = state();
    const [header, payload, signature] = issued.split('.');
    const json = (part) => JSON.parse(Buffer.from(part, 'base64url').toString());
    const part = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
    let sent = issued;
    if (tamper === 'forge') {
      sent = `${header}.${part({ ...json(payload), sub: forgeSub })}.${signature}`;
    } else if (tamper === 'none') {
      sent = `${part({ ...json(header), alg: 'none' })}.${payload}.`;
    } else if (tamper === 'replay' && previous) {
      sent = previous;
    }
    ctx.body = { ...ctx.body, id_token: sent };
    if (tamper === 'huge') ctx.body.padding = 'x'.repeat(2 << 20);
    previous = issued;
  });
  server.on('request', provider.callback());
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
  stage('said it listens');
});
