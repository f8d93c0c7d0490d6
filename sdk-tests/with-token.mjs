// The official BitGoJS SDK, unmodified, with an access token made elsewhere (the console suite
// makes one after a single sign-on, docs/sso.md#bitgojs). Usage:
//   CUSTODIAN_URL=http://127.0.0.1:PORT node with-token.mjs TOKEN
// Prints one JSON line: {"me": <bitgo.me()>, "session": <bitgo.session()>}. Every answer's
// signature is checked by the SDK (authVersion 2), so a wrong one fails here.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { BitGoAPI } = require('@bitgo/sdk-api');

const bitgo = new BitGoAPI({ env: 'custom', customRootURI: process.env.CUSTODIAN_URL, authVersion: 2 });
bitgo.authenticateWithAccessToken({ accessToken: process.argv[2] });
const me = await bitgo.me();
const session = await bitgo.session();
process.stdout.write(`${JSON.stringify({ me, session })}\n`);
