// The official BitGoJS SDK, unmodified, against a running Custodian (docs/decisions.md#signed-requests). Run by
// run.sh, which starts the server and creates the user; response verification is always on
// with env 'custom'.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { createRequire } from 'node:module';
import { createServer } from 'node:http';

const require = createRequire(import.meta.url);
const { BitGoAPI } = require('@bitgo/sdk-api');
const { calculateRequestHeaders, calculateRequestHMAC, calculateV4RequestHeaders, verifyResponse, verifyV4Response } = require('@bitgo/sdk-hmac');
const { Tbtc } = require('@bitgo/sdk-coin-btc');
const { Hteth } = require('@bitgo/sdk-coin-eth');
const { Tltc } = require('@bitgo/sdk-coin-ltc');
const utxolib = require('@bitgo/utxo-lib');

const url = process.env.CUSTODIAN_URL;
const email = process.env.CUSTODIAN_EMAIL;
const password = process.env.CUSTODIAN_PASSWORD;
const walletId = process.env.CUSTODIAN_WALLET;
const ethWalletId = process.env.CUSTODIAN_ETH_WALLET;
const anvilUrl = process.env.CUSTODIAN_ANVIL_URL;
const ltcRpcUrl = process.env.CUSTODIAN_LTC_RPC_URL;
// Where the server's delivery workers reach this machine's receivers.
const receiverHost = process.env.CUSTODIAN_RECEIVER_HOST ?? '127.0.0.1';
// A second user, who gets an ECDH keychain; the service's xpub, from `custodian ecdh show-xpub`.
const ecdhEmail = process.env.CUSTODIAN_ECDH_EMAIL;
const serverXpub = process.env.CUSTODIAN_SERVER_XPUB;
// A third user, who adds a passkey (their refused passkey attempts count toward their lockout).
const passkeyEmail = process.env.CUSTODIAN_PASSKEY_EMAIL;
// An OAuth application: {clientId, clientSecret, ...} from `custodian oauth-client create --json`.
const oauthClient = JSON.parse(process.env.CUSTODIAN_OAUTH_CLIENT);
const OTP = '000000'; // accepted in the test environment

function sdk(authVersion) {
  // BitGoJS keeps serverXpub in its shared 'custom' environment, so every instance has it.
  const bitgo = new BitGoAPI({ env: 'custom', customRootURI: url, authVersion, serverXpub });
  bitgo.register('tbtc', Tbtc.createInstance);
  bitgo.register('hteth', Hteth.createInstance);
  bitgo.register('tltc', Tltc.createInstance);
  return bitgo;
}

async function loggedIn(authVersion) {
  const bitgo = sdk(authVersion);
  const login = await bitgo.authenticate({ username: email, password, otp: OTP });
  assert.match(login.access_token, /^v2x[0-9a-f]{64}$/);
  return { bitgo, token: login.access_token, tokenId: login.token_id };
}

/** Sends a request signed by sdk-hmac itself, as the SDK would, with `change` applied. */
async function signed(token, { method = 'get', path, body = '', change = {} }) {
  const h = calculateRequestHeaders({ url: url + path, text: body, token, method, authVersion: 2 });
  const headers = {
    Authorization: `Bearer ${h.tokenHash}`,
    'Auth-Timestamp': String(h.timestamp),
    HMAC: h.hmac,
    'BitGo-Auth-Version': '2.0',
    ...(body ? { 'Content-Type': 'application/json' } : {}),
    ...change.headers,
  };
  return fetch(url + path, { method: method.toUpperCase(), headers, body: change.body ?? (body || undefined) });
}

for (const authVersion of [2, 3]) {
  test(`auth v${authVersion}: ping, constants, login, me, session, unlock, lock, tokens, logout`, async () => {
    const bitgo = sdk(authVersion);
    assert.equal((await bitgo.ping()).status, 'service is ok!');
    assert.equal((await bitgo.fetchConstants()).server, 'custodian');
    const { bitgo: client } = await loggedIn(authVersion);
    const me = await client.me();
    assert.equal(me.username, email);
    const session = await client.session();
    assert.ok(session.scope || session.id, JSON.stringify(session));
    const unlocked = await client.unlock({ otp: OTP });
    assert.ok(unlocked.session?.unlock || unlocked.unlock, JSON.stringify(unlocked));
    await client.lock();
    const made = await client.addAccessToken({ label: `sdk-v${authVersion}`, scope: ['wallet_view_all'], otp: OTP, duration: 3600, txValueLimit: 1000 });
    assert.match(made.token, /^v2x[0-9a-f]{64}$/);
    assert.equal(made.unlock.txValueLimit, 1000);
    const tokens = await client.listAccessTokens();
    assert.ok(tokens.some((t) => t.id === made.id), 'the new token is listed');
    await client.removeAccessToken({ id: made.id });
    assert.ok(!(await client.listAccessTokens()).some((t) => t.id === made.id), 'and gone once removed');
    await client.logout();
    await assert.rejects(client.me(), (e) => e.status === 401 && e.invalidToken === true);
  });
}

for (const authVersion of [2, 3]) {
  test(`auth v${authVersion}: a wallet and its webhooks, block webhooks and their notifications`, async () => {
    const { bitgo } = await loggedIn(authVersion);
    const coin = bitgo.coin('tbtc');
    const wallet = await coin.wallets().get({ id: walletId });
    assert.equal(wallet.id(), walletId);
    const hookUrl = `https://example.com/sdk-v${authVersion}`;
    const added = await wallet.addWebhook({ url: hookUrl, type: 'transfer', numConfirmations: 1, allToken: false, listenToFailureStates: true });
    assert.equal(added.url, hookUrl);
    assert.equal(added.listenToFailureStates, true);
    const listed = await wallet.listWebhooks();
    assert.ok(listed.webhooks.some((w) => w.id === added.id));
    const simulated = await wallet.simulateWebhook({ webhookId: added.id, transferId: 'sdk-transfer-1' });
    assert.equal(simulated.webhookNotifications[0].simulation, true);
    assert.equal(simulated.webhookNotifications[0].transfer, 'sdk-transfer-1');
    assert.equal((await wallet.removeWebhook({ url: hookUrl, type: 'transfer' })).removed, 1);
    const approvals = await wallet.addWebhook({ url: `${hookUrl}/approvals`, type: 'pendingapproval' });
    const paged = await wallet.listWebhooks({ limit: 1 });
    assert.equal(paged.webhooks.length, 1);
    const approvalSim = await wallet.simulateWebhook({ webhookId: approvals.id, pendingApprovalId: '65a1b2c3d4e5f60718293a4b' });
    assert.equal(JSON.parse(approvalSim.webhookNotifications[0].payload).pendingApprovalId, '65a1b2c3d4e5f60718293a4b');
    await wallet.removeWebhook({ url: `${hookUrl}/approvals`, type: 'pendingapproval' });

    const block = await coin.webhooks().add({ url: `${hookUrl}/block`, type: 'block' });
    assert.ok((await coin.webhooks().list()).webhooks.some((w) => w.id === block.id));
    const blockSim = await coin.webhooks().simulate({ webhookId: block.id, blockId: 'sdk-block-1' });
    assert.equal(blockSim.webhookNotifications[0].simulation, true);
    const notifications = await coin.webhooks().listNotifications();
    assert.ok(Array.isArray(notifications.notifications));
    assert.equal((await coin.webhooks().remove({ url: `${hookUrl}/block`, type: 'block' })).removed, 1);
    await bitgo.logout();
  });
}

for (const authVersion of [2, 3]) {
  test(`auth v${authVersion}: an extensible session is extended with the SDK's signed proof`, async () => {
    const bitgo = sdk(authVersion);
    await bitgo.authenticate({ username: email, password, otp: OTP, extensible: true });
    const before = await bitgo.session();
    const extended = await bitgo.extendToken({ duration: 7200 });
    assert.ok(Date.parse(extended.expires) > Date.parse(before.expires), `${extended.expires} after ${before.expires}`);
    // The same proof over another duration is refused.
    const token = bitgo._token;
    const tampered = await signed(token, {
      method: 'post', path: '/api/v1/user/extendtoken', body: JSON.stringify({ duration: 9000 }),
      change: { headers: { timestamp: String(Date.now()), signature: '00'.repeat(65) } },
    });
    assert.equal(tampered.status, 401);
    assert.equal((await tampered.json()).name, 'InvalidSignature');
    await bitgo.logout();
  });
}

test('ensureEcdhKeychain, then ECDH logins: the token comes encrypted, is opened with serverXpub, and works', async () => {
  const first = sdk(2);
  const login = await first.authenticate({ username: ecdhEmail, password, otp: OTP, ensureEcdhKeychain: true });
  assert.equal(login.noECDHKeychain, true, 'a user without a keychain is told so, with the token in the clear');
  const xpub = login.user.ecdhKeychain;
  assert.match(xpub, /^xpub[1-9A-HJ-NP-Za-km-z]{107}$/);
  const settings = await first.get(first.url('/user/settings')).result();
  assert.equal(settings.settings.ecdhKeychain, xpub);
  assert.equal((await first.me()).ecdhKeychain, xpub);
  await first.logout();
  for (const authVersion of [2, 3]) {
    // The user now has a keychain: the SDK gets encryptedToken, opens it with its password
    // and serverXpub, and keeps the xprv to open the tokens it adds.
    const bitgo = sdk(authVersion);
    const again = await bitgo.authenticate({ username: ecdhEmail, password, otp: OTP, ensureEcdhKeychain: true });
    assert.match(again.derivationPath, /^m\/999999\/\d+\/\d+$/);
    assert.ok(again.encryptedToken && again.encryptedECDHXprv, 'handed over ECDH-encrypted');
    assert.match(again.access_token, /^v2x[0-9a-f]{64}$/, 'opened by the SDK');
    assert.equal(again.user.ecdhKeychain, xpub, 'the keychain is found, no second one made');
    assert.equal((await bitgo.me()).username, ecdhEmail);
    const made = await bitgo.addAccessToken({ label: `ecdh-v${authVersion}`, scope: ['profile'], otp: OTP, duration: 600 });
    assert.ok(made.encryptedToken && made.derivationPath !== again.derivationPath, 'the new token comes encrypted too');
    assert.match(made.token, /^v2x[0-9a-f]{64}$/);
    const user = sdk(authVersion);
    user.authenticateWithAccessToken({ accessToken: made.token });
    assert.equal((await user.me()).username, ecdhEmail, 'the added token works');
    // forceV1Auth: in the clear.
    const v1 = sdk(authVersion);
    const plain = await v1.authenticate({ username: ecdhEmail, password, otp: OTP, forceV1Auth: true });
    assert.match(plain.access_token, /^v2x/);
    assert.equal(plain.encryptedToken, undefined);
    await v1.logout();
    await bitgo.logout();
  }
});

test("BitGo's example scripts' login: POST /api/v2/user/login, then access_token or handleTokenIssuance", async () => {
  for (const [who, encrypted] of [[email, false], [ecdhEmail, true]]) {
    const bitgo = sdk(2);
    const req = bitgo.post(bitgo.url('/user/login', 2));
    const res = await req.send({ email: who, password, otp: OTP });
    const body = res.body;
    let token = body.access_token;
    if (encrypted) {
      assert.equal(token, undefined);
      token = (await bitgo.handleTokenIssuance(body, password)).token;
      // The answer is signed with the token it carries (as the SDK checks its own login).
      const check = verifyResponse({ url: req.url, hmac: res.header.hmac, statusCode: res.status, text: res.text,
        timestamp: res.header.timestamp, token, method: 'post', authVersion: 2 });
      assert.equal(check.isValid, true);
    }
    assert.match(token, /^v2x[0-9a-f]{64}$/);
    bitgo.authenticateWithAccessToken({ accessToken: token });
    assert.equal((await bitgo.me()).username, who);
    await bitgo.logout();
  }
});

// A software passkey: ES256 with node's crypto, making what a browser returns from
// navigator.credentials.create() (attestation "none", WebAuthn §6.5.4) and .get() (a signature
// over authenticatorData ‖ SHA-256(clientDataJSON), §6.3.3), binary fields base64url.
class SoftPasskey {
  constructor(origin = 'http://localhost:3080', rpId = 'localhost') {
    Object.assign(this, { origin, rpId, counter: 0, id: randomBytes(32) });
    this.keys = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  }
  static b64(b) { return Buffer.from(b).toString('base64url'); }
  static cborBytes(b) {
    const head = b.length < 24 ? [0x40 | b.length] : b.length < 256 ? [0x58, b.length] : [0x59, b.length >> 8, b.length & 255];
    return Buffer.concat([Buffer.from(head), Buffer.from(b)]);
  }
  static cborText(t) { return Buffer.concat([Buffer.from([0x60 | t.length]), Buffer.from(t)]); }
  authData(flags, counter) {
    const c = Buffer.alloc(4);
    c.writeUInt32BE(counter);
    return Buffer.concat([createHash('sha256').update(this.rpId).digest(), Buffer.from([flags]), c]);
  }
  register(options) {
    this.userHandle = options.publicKey.user.id;
    const jwk = this.keys.publicKey.export({ format: 'jwk' });
    const cose = Buffer.concat([Buffer.from([0xa5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21]),
      SoftPasskey.cborBytes(Buffer.from(jwk.x, 'base64url')), Buffer.from([0x22]), SoftPasskey.cborBytes(Buffer.from(jwk.y, 'base64url'))]);
    const len = Buffer.alloc(2);
    len.writeUInt16BE(this.id.length);
    const authData = Buffer.concat([this.authData(0x45, 0), Buffer.alloc(16), len, this.id, cose]);
    const attestation = Buffer.concat([Buffer.from([0xa3]), SoftPasskey.cborText('fmt'), SoftPasskey.cborText('none'),
      SoftPasskey.cborText('attStmt'), Buffer.from([0xa0]), SoftPasskey.cborText('authData'), SoftPasskey.cborBytes(authData)]);
    const clientData = JSON.stringify({ type: 'webauthn.create', challenge: options.publicKey.challenge, origin: this.origin });
    const id = SoftPasskey.b64(this.id);
    return { id, rawId: id, type: 'public-key', response: { attestationObject: SoftPasskey.b64(attestation), clientDataJSON: SoftPasskey.b64(clientData) } };
  }
  assert(options, { counter = ++this.counter, origin = this.origin } = {}) {
    const clientData = JSON.stringify({ type: 'webauthn.get', challenge: options.publicKey.challenge, origin });
    const authData = this.authData(0x05, counter);
    const signature = sign('sha256', Buffer.concat([authData, createHash('sha256').update(clientData).digest()]), this.keys.privateKey);
    const id = SoftPasskey.b64(this.id);
    return { id, rawId: id, type: 'public-key', response: { authenticatorData: SoftPasskey.b64(authData),
      clientDataJSON: SoftPasskey.b64(clientData), signature: SoftPasskey.b64(signature), userHandle: this.userHandle } };
  }
}

test('authenticateWithPasskey: a passkey added through the API signs in; replayed, phished and cloned answers are refused', async () => {
  const bitgo = sdk(2);
  await bitgo.authenticate({ username: passkeyEmail, password, otp: OTP });
  const key = new SoftPasskey();
  const options = await bitgo.get(bitgo.url('/user/otp/webauthn/register', 2)).result();
  const device = await bitgo.put(bitgo.url('/user/otp', 2))
    .send({ type: 'webauthn', otp: JSON.stringify(key.register(options)), label: 'sdk suite', verificationOtp: OTP }).result();
  assert.equal(device.type, 'webauthn');
  const challenge = () => bitgo.post(bitgo.microservicesUrl('/api/auth/v1/passkey/challenge')).send({ email: passkeyEmail }).result();
  const first = key.assert(await challenge());
  for (const authVersion of [2, 3]) {
    const client = sdk(authVersion);
    const answer = authVersion === 2 ? first : key.assert(await challenge());
    const login = await client.authenticateWithPasskey(JSON.stringify(answer));
    assert.equal(login.grant_type, 'passkey');
    assert.equal((await client.me()).username, passkeyEmail);
    await client.logout();
  }
  const refused = (e) => e.status === 401;
  await assert.rejects(sdk(2).authenticateWithPasskey(JSON.stringify(first)), refused, 'a replayed answer');
  const phished = key.assert(await challenge(), { origin: 'https://custodian.example.evil' });
  await assert.rejects(sdk(2).authenticateWithPasskey(JSON.stringify(phished)), refused, 'another origin');
  const cloned = key.assert(await challenge(), { counter: 1 });
  await assert.rejects(sdk(2).authenticateWithPasskey(JSON.stringify(cloned)), refused, 'a counter gone back');
  await bitgo.del(bitgo.url(`/user/otp/${device.id}`)).send({ otp: OTP }).result();
  const removed = key.assert(await challenge());
  await assert.rejects(sdk(2).authenticateWithPasskey(JSON.stringify(removed)), refused, 'a removed passkey');
  await bitgo.logout();
});

/**
 * The console in a "browser" (fetch, no redirects followed): open `authUrl` (an authorization
 * request), sign in, allow, and return the URL the browser is sent back to.
 */
async function consentTo(authUrl) {
  const signIn = await fetch(`${url}/console/login`, {
    method: 'POST', redirect: 'manual',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ email, password, otp: OTP }),
  });
  const cookie = signIn.headers.get('set-cookie').split(';')[0];
  const start = await fetch(authUrl, { redirect: 'manual' });
  const consentUrl = url + start.headers.get('location');
  const page = await fetch(consentUrl, { headers: { cookie }, redirect: 'manual' });
  if (page.status !== 200) return page.headers.get('location');
  const csrf = (await page.text()).match(/name="csrf" value="([0-9a-f]+)"/)[1];
  const decide = await fetch(`${url}/console/oauth/authorize`, {
    method: 'POST', redirect: 'manual',
    headers: { cookie, 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ ...Object.fromEntries(new URL(consentUrl).searchParams), csrf, decision: 'approve' }),
  });
  return decide.headers.get('location');
}

/** A code for the suite's OAuth application, as the console gives it after consent. */
async function authorizationCode() {
  const query = new URLSearchParams({ response_type: 'code', client_id: oauthClient.clientId, scope: 'profile wallet_view_all', state: 'sdk' });
  const answer = new URL(await consentTo(`${url}/oauth/authorize?${query}`));
  assert.equal(answer.searchParams.get('state'), 'sdk');
  return answer.searchParams.get('code');
}

test('authenticateWithAuthCode: a code from the consent page, me, refreshToken twice, the old refresh token refused', async () => {
  const bitgo = new BitGoAPI({ env: 'custom', customRootURI: url, serverXpub, clientId: oauthClient.clientId, clientSecret: oauthClient.clientSecret });
  const login = await bitgo.authenticateWithAuthCode({ authCode: await authorizationCode() });
  assert.equal(login.grant_type, 'authorization_code');
  assert.match(login.access_token, /^v2x[0-9a-f]{64}$/);
  assert.equal((await bitgo.me()).username, email);
  const first = login.refresh_token;
  const again = await bitgo.refreshToken();
  assert.equal(again.grant_type, 'refresh_token');
  assert.notEqual(again.refresh_token, first, 'rotated');
  const third = await bitgo.refreshToken();
  assert.notEqual(third.refresh_token, again.refresh_token);
  assert.equal((await bitgo.me()).username, email);
  const other = new BitGoAPI({ env: 'custom', customRootURI: url, serverXpub, clientId: oauthClient.clientId, clientSecret: oauthClient.clientSecret });
  await assert.rejects(other.refreshToken({ refreshToken: first }), (e) => e.status === 400 && /invalid_grant|used before/.test(e.message + JSON.stringify(e.result)));
  // The reuse revoked the grant: the live token is refused.
  await assert.rejects(bitgo.me(), (e) => e.status === 401);
});

test('openid-client (certified relying party): discovery, code + PKCE + nonce, id_token, userinfo, refresh, revocation', async () => {
  const oidc = await import('openid-client');
  const options = { execute: [oidc.allowInsecureRequests] };
  const config = await oidc.discovery(new URL(url), oauthClient.clientId, oauthClient.clientSecret, undefined, options);
  assert.equal(config.serverMetadata().issuer, url);
  const verifier = oidc.randomPKCECodeVerifier();
  const nonce = oidc.randomNonce();
  const state = oidc.randomState();
  const authUrl = oidc.buildAuthorizationUrl(config, {
    redirect_uri: 'http://127.0.0.1:9/callback', scope: 'openid profile', state, nonce,
    code_challenge: await oidc.calculatePKCECodeChallenge(verifier), code_challenge_method: 'S256',
  });
  const back = await consentTo(authUrl.href);
  const tokens = await oidc.authorizationCodeGrant(config, new URL(back), { pkceCodeVerifier: verifier, expectedNonce: nonce, expectedState: state });
  const claims = tokens.claims(); // the id_token, validated by the library against the JWKS
  assert.equal(claims.email, email);
  assert.deepEqual(claims.amr, ['pwd', 'otp']);
  const info = await oidc.fetchUserInfo(config, tokens.access_token, claims.sub);
  assert.equal(info.email, email);
  const refreshed = await oidc.refreshTokenGrant(config, tokens.refresh_token);
  assert.notEqual(refreshed.refresh_token, tokens.refresh_token);
  assert.equal(refreshed.claims().sub, claims.sub);
  await oidc.tokenRevocation(config, refreshed.refresh_token);
  await assert.rejects(oidc.refreshTokenGrant(config, refreshed.refresh_token), (e) => e.error === 'invalid_grant');
});

test('a wrong OTP sets needsOTP', async () => {
  await assert.rejects(
    sdk(2).authenticate({ username: email, password, otp: '123456' }),
    (e) => e.status === 401 && e.needsOTP === true,
  );
});

test('an unknown token sets invalidToken', async () => {
  const bitgo = sdk(3);
  bitgo.authenticateWithAccessToken({ accessToken: 'v2x' + randomBytes(32).toString('hex') });
  await assert.rejects(bitgo.me(), (e) => e.status === 401 && e.invalidToken === true);
});

test('replayed, stale, hash-only and tampered requests are refused', async () => {
  const { token } = await loggedIn(2);
  const path = '/api/v1/user/me';
  const h = calculateRequestHeaders({ url: url + path, text: '', token, method: 'get', authVersion: 2 });
  const headers = { Authorization: `Bearer ${h.tokenHash}`, 'Auth-Timestamp': String(h.timestamp), HMAC: h.hmac, 'BitGo-Auth-Version': '2.0' };
  assert.equal((await fetch(url + path, { headers })).status, 200);
  const again = await fetch(url + path, { headers });
  assert.equal(again.status, 401);
  assert.equal((await again.json()).name, 'RequestReplayed');

  const old = Date.now() - 6 * 60 * 1000;
  const staleMac = calculateRequestHMAC({ url: url + path, text: '', timestamp: old, token, method: 'get', authVersion: 2 });
  const stale = await signed(token, { path, change: { headers: { 'Auth-Timestamp': String(old), HMAC: staleMac } } });
  assert.equal(stale.status, 401);
  assert.equal((await stale.json()).name, 'StaleRequest');

  const hashOnly = await fetch(url + path, { headers: { Authorization: `Bearer ${createHash('sha256').update(token).digest('hex')}` } });
  assert.equal(hashOnly.status, 401);
  assert.equal(hashOnly.headers.get('x-auth-required'), 'true');

  const body = JSON.stringify({ otp: OTP });
  const tampered = await signed(token, { method: 'post', path: '/api/v1/user/unlock', body, change: { body: JSON.stringify({ otp: '111111' }) } });
  assert.equal(tampered.status, 401);
  assert.equal((await tampered.json()).name, 'InvalidSignature');
});

test('auth v4: a round trip built and checked with sdk-hmac\'s v4 helpers, once only', async () => {
  const { token, tokenId } = await loggedIn(2);
  assert.match(tokenId, /^[0-9a-f]{32}$/);
  const path = '/api/v1/user/unlock';
  const rawBody = JSON.stringify({ otp: OTP });
  const h = calculateV4RequestHeaders({ method: 'POST', pathWithQuery: path, rawBody: Buffer.from(rawBody), rawToken: token, authRequestId: randomBytes(8).toString('hex') });
  const request = () => fetch(url + path, {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${tokenId}`,
      'Content-Type': 'application/json',
      'X-Request-Timestamp': String(h.timestampSec),
      'X-Signature': h.hmac,
      'X-Content-SHA256': h.bodyHashHex,
      'X-Auth-Request-Id': h.authRequestId,
    },
    body: rawBody,
  });
  const res = await request();
  assert.equal(res.status, 200);
  const text = await res.text();
  const check = verifyV4Response({
    hmac: res.headers.get('x-signature'),
    timestampSec: Number(res.headers.get('x-request-timestamp')),
    method: 'POST',
    pathWithQuery: path,
    bodyHashHex: createHash('sha256').update(text).digest('hex'),
    authRequestId: res.headers.get('x-auth-request-id'),
    statusCode: res.status,
    rawToken: token,
  });
  assert.ok(check.isValid, `response signature: ${check.preimage}`);
  assert.ok(check.isInResponseValidityWindow);
  const again = await request();
  assert.equal(again.status, 401);
  assert.equal((await again.json()).name, 'RequestReplayed');
});

/** A JSON-RPC call to the test node. */
async function rpc(method, params) {
  const res = await fetch(anvilUrl, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = await res.json();
  if (body.error) throw new Error(`${method}: ${JSON.stringify(body.error)}`);
  return body.result;
}

/** Polls `check` every 100 ms until it returns something, for at most `secs` seconds. */
async function until(what, secs, check) {
  const deadline = Date.now() + secs * 1000;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test('chain-fed data: a transfer webhook after a real transaction, wallet.transfers(), getTransfer() and addresses()', async () => {
  const RICH = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266';
  const WATCHED = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8';
  const received = [];
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => { received.push(JSON.parse(body)); res.end('ok'); });
  });
  await new Promise((r) => receiver.listen(0, receiverHost, r));
  try {
    const { bitgo } = await loggedIn(2);
    const wallet = await bitgo.coin('hteth').wallets().get({ id: ethWalletId });
    assert.equal(wallet.id(), ethWalletId);
    await wallet.addWebhook({ url: `http://${receiverHost}:${receiver.address().port}/hook`, type: 'transfer' });
    const txid = await rpc('eth_sendTransaction', [{ from: RICH, to: WATCHED, value: '0xde0b6b3a7640000' }]);
    // Two more blocks: the transfer reaches `confirmations` (2).
    await rpc('anvil_mine', ['0x2']);
    const states = await until('unconfirmed and confirmed notifications', 30, () => {
      const mine = received.filter((n) => n.hash === txid).map((n) => n.state);
      // Both: delivery is not ordered, and blocks read together are announced together.
      return mine.includes('confirmed') && mine.includes('unconfirmed') && mine;
    });
    assert.deepEqual(states.sort(), ['confirmed', 'unconfirmed']);
    assert.ok(received.every((n) => n.wallet === ethWalletId && n.coin === 'hteth'), JSON.stringify(received));

    const { transfers } = await wallet.transfers();
    const listed = transfers.find((t) => t.txid === txid);
    assert.ok(listed, JSON.stringify(transfers));
    assert.equal(listed.state, 'confirmed');
    assert.equal(listed.type, 'receive');
    assert.equal(listed.valueString, '1000000000000000000');
    const one = await wallet.getTransfer({ id: listed.id });
    assert.equal(one.id, listed.id);
    assert.equal(one.valueString, '1000000000000000000');
    assert.deepEqual(one.entries.map((e) => [e.address, e.valueString]), [[WATCHED, '1000000000000000000']]);
    const { addresses } = await wallet.addresses();
    assert.deepEqual(addresses.map((a) => a.address), [WATCHED]);
    await bitgo.logout();
  } finally {
    receiver.close();
  }
});

test('a custodial wallet: wallets().add, sendMany with an OTP gives a pending approval, another admin approves, the send is mined and confirmed; reject() refuses the next; policy rules hold and deny', async () => {
  const RICH = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266';
  const PAYEE = '0x90F79bf6EB2c4f870365E785982E1f101E93b906';
  const enterprise = process.env.CUSTODIAN_ENTERPRISE;
  const { bitgo } = await loggedIn(2);
  const { wallet } = await bitgo.coin('hteth').wallets().add({ label: 'sdk custodial', enterprise, type: 'custodial' });
  assert.equal(wallet.type(), 'custodial');
  const address = wallet.receiveAddress();
  assert.match(address, /^0x[0-9a-fA-F]{40}$/);
  const [keyId] = wallet.keyIds();
  const key = await bitgo.coin('hteth').keychains().get({ id: keyId });
  assert.equal(key.ethAddress, address.toLowerCase());
  assert.equal(key.prv, undefined);
  // Where the key lives: the run's key store (run.sh sets pkcs11 for the SoftHSM2 run).
  assert.equal(key.keyStore, process.env.CUSTODIAN_KEYS_BACKEND ?? 'sealed');
  await rpc('eth_sendTransaction', [{ from: RICH, to: address, value: '0xde0b6b3a7640000' }]);
  await rpc('anvil_mine', ['0x2']);
  await until('the wallet is funded', 30, async () => {
    const w = await bitgo.get(bitgo.coin('hteth').url(`/wallet/${wallet.id()}`)).query({ expandBalance: true }).result();
    // Withdrawals are admitted against the balance at the chain's confirmation depth.
    return w.balanceString === '1000000000000000000' && w.confirmedBalanceString === '1000000000000000000';
  });
  // Without a spending limit the session must be unlocked first (§4.3).
  await assert.rejects(wallet.sendMany({ recipients: [{ address: PAYEE, amount: '1234' }], otp: OTP }), (e) => e.status === 401 && e.result?.needsUnlock === true);
  await bitgo.unlock({ otp: OTP, duration: 600 });
  const pending = await wallet.sendMany({ recipients: [{ address: PAYEE, amount: '1234' }], otp: OTP, comment: 'sdk' });
  assert.equal(pending.state, 'pending');
  assert.equal(pending.info.type, 'transactionRequest');
  assert.equal(pending.info.transactionRequest.requestedAmount, '1234');
  const { pendingApprovals } = await bitgo.coin('hteth').pendingApprovals().list({ walletId: wallet.id() });
  assert.deepEqual(pendingApprovals.map((p) => p.id()), [pending.id]);

  const approver = sdk(2);
  await approver.authenticate({ username: process.env.CUSTODIAN_APPROVER_EMAIL, password, otp: OTP });
  const approval = await approver.coin('hteth').pendingApprovals().get({ id: pending.id });
  const before = BigInt(await rpc('eth_getBalance', [PAYEE, 'latest']));
  const approved = await approval.approve({ otp: OTP });
  assert.equal(approved.state, 'approved');
  const hash = await until('the withdrawal is sent', 30, async () => {
    const res = await bitgo.get(bitgo.url(`/wallet/${wallet.id()}/txrequests`, 2)).query({ txRequestIds: pending.txRequestId }).result();
    const t = res.txRequests[0];
    return t.state === 'delivered' && t.transactions[0].txHash;
  });
  await rpc('anvil_mine', ['0x2']);
  const sent = await until('the send is confirmed', 30, async () => {
    const { transfers } = await wallet.transfers();
    return transfers.find((t) => t.txid === hash && t.state === 'confirmed');
  });
  assert.equal(sent.type, 'send');
  assert.equal(BigInt(await rpc('eth_getBalance', [PAYEE, 'latest'])), before + 1234n);
  const receipt = await rpc('eth_getTransactionReceipt', [hash]);
  assert.equal(receipt.status, '0x1');
  assert.equal(receipt.from, address.toLowerCase());
  // BitGo's fields of the send: valueString includes the network fee, baseValueString ("value
  // excluding network fees") does not, feeString is the fee.
  const fee = BigInt(receipt.gasUsed) * BigInt(receipt.effectiveGasPrice);
  assert.equal(sent.baseValueString, '-1234');
  assert.equal(sent.feeString, fee.toString());
  assert.equal(sent.valueString, (-(1234n + fee)).toString());

  // A token withdrawal through the same sendMany (a recipient's tokenName), when run.sh deployed
  // the test token.
  const token = process.env.CUSTODIAN_TOKEN_CONTRACT;
  if (token) {
    const word = (hex) => hex.replace(/^0x/, '').toLowerCase().padStart(64, '0');
    const tokens = (10n ** 18n).toString(16);
    await rpc('eth_sendTransaction', [{ from: RICH, to: token, data: '0xa9059cbb' + word(address) + word(tokens) }]);
    await rpc('anvil_mine', ['0x2']);
    await until('the token balance is read', 30, async () => {
      const w = await bitgo.get(bitgo.coin('hteth').url(`/wallet/${wallet.id()}`)).query({ allTokens: true }).result();
      return w.tokens?.['hteth:tst']?.confirmedBalanceString === '1000000000000000000';
    });
    const tokenPending = await wallet.sendMany({ recipients: [{ address: PAYEE, amount: '5000', tokenName: 'hteth:tst' }], otp: OTP });
    assert.equal(tokenPending.info.transactionRequest.requestedAmount, '5000');
    await (await approver.coin('hteth').pendingApprovals().get({ id: tokenPending.id })).approve({ otp: OTP });
    const tokenHash = await until('the token withdrawal is sent', 30, async () => {
      const res = await bitgo.get(bitgo.url(`/wallet/${wallet.id()}/txrequests`, 2)).query({ txRequestIds: tokenPending.txRequestId }).result();
      const t = res.txRequests[0];
      return t.state === 'delivered' && t.transactions[0].txHash;
    });
    const tokenReceipt = await until('the token transfer is mined', 30, async () => rpc('eth_getTransactionReceipt', [tokenHash]));
    assert.equal(tokenReceipt.status, '0x1');
    assert.equal(tokenReceipt.to, token.toLowerCase());
    const paid = await rpc('eth_call', [{ to: token, data: '0x70a08231' + word(PAYEE) }, 'latest']);
    assert.equal(BigInt(paid), 5000n);
  }
  // BitGo's transaction request route, through the SDK's signed requests: one withdrawal per
  // idempotency key.
  const intent = { intentType: 'payment', recipients: [{ address: { address: PAYEE }, amount: { value: '77', symbol: 'hteth' } }] };
  const body = { intent, idempotencyKey: `sdk-${wallet.id()}`, apiVersion: 'full' };
  const made = await bitgo.post(bitgo.url(`/wallet/${wallet.id()}/txrequests`, 2)).send(body).result();
  assert.equal(made.state, 'pendingApproval');
  const again = await bitgo.post(bitgo.url(`/wallet/${wallet.id()}/txrequests`, 2)).send(body).result();
  assert.equal(again.txRequestId, made.txRequestId);
  await (await approver.coin('hteth').pendingApprovals().get({ id: made.pendingApprovalId })).reject();

  const second = await wallet.sendMany({ recipients: [{ address: PAYEE, amount: '99' }], otp: OTP });
  const refused = await (await approver.coin('hteth').pendingApprovals().get({ id: second.id })).reject();
  assert.equal(refused.state, 'rejected');

  // Ten sendMany at once, each with a right code: one user's codes are checked in turn, so none
  // is counted as a wrong one and all ten pass (then the approver rejects them: they count for
  // nothing below).
  const ten = await Promise.all(Array.from({ length: 10 }, (_, i) =>
    wallet.sendMany({ recipients: [{ address: PAYEE, amount: String(11 + i) }], otp: OTP })));
  assert.deepEqual(ten.map((p) => p.state), Array(10).fill('pending'));
  for (const p of ten) {
    await (await approver.coin('hteth').pendingApprovals().get({ id: p.id })).reject();
  }

  // Policy rules through BitGoJS (docs/policy.md). The wallet has sent 1,234 wei of ETH in the
  // last hour (rejected ones do not count): a 2,000 wei hourly limit that asks for the approver.
  const approverId = (await approver.me()).id;
  const daily = { id: 'sdk-hourly', type: 'velocityLimit', condition: { amountString: '2000', timeWindow: 3600 }, action: { type: 'getApproval', userIds: [approverId] }, message: 'sdk' };
  const withRule = await wallet.createPolicyRule(daily);
  assert.equal(withRule.admin.policy.rules[0].id, 'sdk-hourly');
  const under = await wallet.sendMany({ recipients: [{ address: PAYEE, amount: '500' }], otp: OTP });
  assert.deepEqual(under.singleRunResults, [{ ruleId: 'sdk-hourly', triggered: false }]);
  const over = await wallet.sendMany({ recipients: [{ address: PAYEE, amount: '800' }], otp: OTP });
  assert.deepEqual(over.singleRunResults, [{ ruleId: 'sdk-hourly', triggered: true }]);
  assert.match(over.reasons[0], /^velocity limit sdk-hourly: /);
  assert.deepEqual(over.ruleApprovals, [{ ruleId: 'sdk-hourly', userIds: [approverId], final: false }]);
  // Raising the limit loosens: a pending approval the other admin approves through the SDK,
  // which applies it. Removing the rule waits too; rejected, it stays. Lowering applies at once.
  const raise = await wallet.setPolicyRule({ ...daily, condition: { amountString: '9000', timeWindow: 3600 } });
  assert.equal(raise.state, 'pending');
  assert.equal(raise.info.type, 'policyRuleRequest');
  const raiseApproval = await approver.coin('hteth').pendingApprovals().get({ id: raise.id });
  assert.equal(raiseApproval.type(), 'policyRuleRequest');
  assert.equal((await raiseApproval.approve({ otp: OTP })).state, 'approved');
  const rules = async () => (await bitgo.get(bitgo.coin('hteth').url(`/wallet/${wallet.id()}`)).result()).admin.policy.rules;
  assert.equal((await rules())[0].condition.amountString, '9000');
  const removal = await wallet.removePolicyRule({ id: 'sdk-hourly' });
  assert.equal(removal.info.policyRuleRequest.action, 'remove');
  await (await approver.coin('hteth').pendingApprovals().get({ id: removal.id })).reject();
  const lowered = await wallet.setPolicyRule({ ...daily, condition: { amountString: '1500', timeWindow: 3600 } });
  assert.equal(lowered.admin.policy.rules[0].condition.amountString, '1500');
  // A whitelist deny is an error the SDK surfaces, naming the rule.
  await wallet.createPolicyRule({ id: 'sdk-payees', type: 'coinAddressWhitelist', condition: { addresses: [PAYEE] }, action: { type: 'deny' } });
  await assert.rejects(
    wallet.sendMany({ recipients: [{ address: RICH, amount: '1' }], otp: OTP }),
    (e) => e.status === 403 && e.result?.name === 'PolicyDenied' && /sdk-payees/.test(e.result.error),
  );
  for (const p of [under, over]) {
    await (await approver.coin('hteth').pendingApprovals().get({ id: p.id })).reject();
  }
  await bitgo.logout();
  await approver.logout();
});

test("a UTXO multisig wallet: keychains().add, wallets().add, createAddress checked by the SDK against the keychains on every chain code, addresses()", async () => {
  const enterprise = process.env.CUSTODIAN_ENTERPRISE;
  const { bitgo } = await loggedIn(2);
  const coin = bitgo.coin('tltc');
  const keys = [];
  for (const source of ['user', 'backup', 'bitgo']) {
    const pub = utxolib.bip32.fromSeed(randomBytes(32)).neutered().toBase58();
    const key = await coin.keychains().add({ pub, source });
    assert.equal(key.pub, pub);
    keys.push(key);
  }
  const { wallet } = await coin.wallets().add({ label: 'sdk ltc', enterprise, m: 2, n: 3, keys: keys.map((k) => k.id) });
  assert.deepEqual(wallet.keyIds(), keys.map((k) => k.id));
  // createAddress fetches the keychains and checks each address against them itself
  // (abstract-utxo's isWalletAddress): a wrong derivation throws here.
  for (const chain of [0, 1, 10, 11, 20, 21]) {
    const address = await wallet.createAddress({ chain });
    assert.equal(address.chain, chain);
    assert.equal(address.index, chain === 0 ? 1 : 0);
  }
  // `count` > 1 posts identical signed requests in the same millisecond: the replay guard
  // takes the first and refuses the copies (docs/decisions.md#watching-a-chain). One at a time:
  const next = await wallet.createAddress({ chain: 10 });
  assert.equal(next.index, 1);
  // The check is real: the same keychains refuse that address at another index.
  const keychains = keys.map((k) => ({ pub: k.pub }));
  await assert.rejects(coin.isWalletAddress({ address: next.address, keychains, chain: 10, index: 9 }));
  assert.equal(await coin.isWalletAddress({ address: next.address, keychains, chain: 10, index: 1 }), true);
  const listed = await wallet.addresses({ limit: 50 });
  assert.equal(listed.addresses.length, 8);
  assert.ok(listed.addresses.every((a) => Number.isInteger(a.chain) && Number.isInteger(a.index)));
  if (!ltcRpcUrl) return; // a deployment without a Litecoin node (deploy/multihost)
  // A real payment from Litecoin Core to the chain-0 address (p2sh: regtest writes it as
  // testnet does), read back through BitGoJS once the watcher confirms it.
  const first = listed.addresses.find((a) => a.chain === 0 && a.index === 0).address;
  await ltc('createwallet', ['miner']);
  const miner = await ltc('getnewaddress', [], 'miner');
  await ltc('generatetoaddress', [101, miner]);
  const txid = await ltc('sendtoaddress', [first, 0.5, '', '', false, false], 'miner');
  await ltc('generatetoaddress', [2, miner]);
  const { transfers } = await until('the payment confirmed', 60, async () => {
    const t = await wallet.transfers();
    return t.transfers.some((x) => x.txid === txid && x.state === 'confirmed') && t;
  });
  const t = transfers.find((x) => x.txid === txid);
  assert.equal(t.type, 'receive');
  assert.equal(t.valueString, '50000000');
  const mine = t.outputs.filter((o) => o.wallet === wallet.id());
  assert.deepEqual(mine.map((o) => [o.address, o.chain, o.index, o.valueString]), [[first, 0, 0, '50000000']]);
  const one = await wallet.getTransfer({ id: t.id });
  assert.equal(one.txid, txid);
  const { unspents } = await wallet.unspents();
  assert.deepEqual(unspents.map((u) => [u.id.split(':')[0], u.address, u.value, u.chain, u.index]), [[txid, first, 50000000, 0, 0]]);
  const w = await bitgo.get(coin.url(`/wallet/${wallet.id()}`)).query({ expandBalance: true }).result();
  assert.deepEqual([w.balanceString, w.confirmedBalanceString, w.spendableBalanceString], ['50000000', '50000000', '50000000']);
});

/** A JSON-RPC call to the Litecoin node (its wallet `wallet`, if named). */
async function ltc(method, params, wallet) {
  const res = await fetch(wallet ? `${ltcRpcUrl}/wallet/${wallet}` : ltcRpcUrl, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Basic ${Buffer.from('sdk:sdk').toString('base64')}` },
    body: JSON.stringify({ jsonrpc: '1.0', id: 1, method, params }),
  });
  const body = await res.json();
  if (body.error) throw new Error(`${method}: ${JSON.stringify(body.error)}`);
  return body.result;
}
