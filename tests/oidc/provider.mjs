// A real OpenID Connect provider for the sign-in tests: npm's oidc-provider (a certified
// implementation) with one confidential client and the users of a JSON file, and its
// built-in development login and consent pages (any password is accepted; the login name
// picks the account). Never for production.
//
//   node provider.mjs CONFIG.json
//   CONFIG: {"port": 0, "client_id": "...", "client_secret": "...", "redirect_uri": "...",
//            "users": {"alice@example.com": {"name": "Alice", "groups": ["chat"]}, ...}}
//   A user's "email_verified", where given, is sent as it is (a string "false" as some
//   providers send it); null leaves the claim out; otherwise it is true.
// Prints "listening <issuer>" once it serves.
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${config.port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: config.client_id,
    client_secret: config.client_secret,
    redirect_uris: [config.redirect_uri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
  }],
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  // Without it a code grant's claims go only to userinfo; the app reads both.
  conformIdTokenClaims: false,
  async findAccount(ctx, id) {
    const user = config.users[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        const claims = {
          sub: id, email: id, email_verified: true, name: user.name,
          preferred_username: id.split('@')[0], groups: user.groups,
        };
        if ('email_verified' in user) claims.email_verified = user.email_verified;
        if (user.email_verified === null) delete claims.email_verified;
        return claims;
      },
    };
  },
  // Short-lived sessions are not what is under test here.
  ttl: { Session: 3600, Interaction: 600, Grant: 3600, AccessToken: 600, IdToken: 600, AuthorizationCode: 60 },
});

provider.listen(config.port, '127.0.0.1', () => console.log(`listening ${issuer}`));
