#!/usr/bin/python3
"""A TEST ISSUER: a small OpenID Connect identity provider for Meridian's single sign-on tests.

It is the one fake of tests/oidc_test.cc (docs/adr/0021-single-sign-on.md): a real HTTP server on
loopback that serves OIDC discovery, a JWK Set, the device authorization grant (RFC 8628) and a
token endpoint, and signs ID tokens with RS256 (python3-jwt on python3-cryptography, both from
Debian). It never runs in production. Beyond what a provider offers, it has test-only endpoints:

  GET  /device?user_code=C&login=U[&deny=1]  the user U approves (or denies) code C, as the
                                             provider's sign-in page would after a password
  GET  /authorize    the authorization code flow's sign-in page: a form asking for a user name
                     (no password), which POSTs back and redirects to redirect_uri with a code
  POST /test/mint    {"claims": {...}, "drop": [...], "kid": K, "alg": "RS256" | "none",
                      "key": "current" | "foreign", "tamper": bool}  -> {"token": T}
  POST /test/rotate  {"retire": bool}  a new signing key; with retire, older ones leave the set
  GET  /test/stats   how many times the JWK Set was fetched

  oidc_test_issuer.py --port-file F --client-id ID --users '{"alice": ["group", ...]}'
"""

import argparse
import base64
import hashlib
import html
import json
import secrets
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Keys:
    """Signing keys by kid; the newest signs, the published ones are in the JWK Set."""

    def __init__(self):
        self.lock = threading.Lock()
        self.keys = {}
        self.published = []
        self.current = None
        self.count = 0
        self.rotate(retire=False)
        # A key the JWK Set never holds: what a forger signs with.
        self.foreign = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def rotate(self, retire):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        with self.lock:
            self.count += 1
            kid = "k%d" % self.count
            self.keys[kid] = key
            self.published = [kid] if retire else self.published + [kid]
            self.current = kid
        return kid

    def jwks(self):
        with self.lock:
            out = []
            for kid in self.published:
                jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.keys[kid].public_key()))
                jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
                out.append(jwk)
            return {"keys": out}


class Issuer:
    def __init__(self, client_id, users):
        self.client_id = client_id
        self.users = users
        self.keys = Keys()
        self.url = ""
        self.devices = {}  # device_code -> {user_code, state, user}
        self.codes = {}  # authorization code -> {user, redirect_uri, challenge, nonce}
        self.jwks_fetches = 0
        self.lock = threading.Lock()

    def claims(self, user, nonce=None):
        now = int(time.time())
        extra = {"nonce": nonce} if nonce else {}
        return extra | {
            "iss": self.url,
            "aud": self.client_id,
            "sub": "id-" + user,
            "preferred_username": user,
            "email": user + "@example.test",
            "groups": self.users.get(user, []),
            "iat": now,
            "exp": now + 600,
        }

    def sign(self, claims, kid=None, alg="RS256", key="current", tamper=False):
        kid = kid or self.keys.current
        if alg == "none":
            header = {"alg": "none", "typ": "JWT", "kid": kid}
            return ".".join(
                [b64url(json.dumps(header).encode()), b64url(json.dumps(claims).encode()), ""])
        signer = self.keys.foreign if key == "foreign" else self.keys.keys[self.keys.current]
        token = jwt.encode(claims, signer, algorithm=alg, headers={"kid": kid})
        if tamper:  # one byte of the signature changed
            head, body, sig = token.split(".")
            raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
            raw[len(raw) // 2] ^= 1
            token = ".".join([head, body, b64url(bytes(raw))])
        return token


class Handler(BaseHTTPRequestHandler):
    issuer: Issuer = None

    def log_message(self, fmt, *args):
        sys.stderr.write("test-issuer: " + fmt % args + "\n")

    def answer(self, status, body, content_type="application/json", location=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def form(self):
        length = int(self.headers.get("Content-Length") or 0)
        text = self.rfile.read(length).decode()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            return json.loads(text or "{}")
        return {k: v[0] for k, v in urllib.parse.parse_qs(text).items()}

    def do_GET(self):
        iss = self.issuer
        url = urllib.parse.urlparse(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        if url.path == "/.well-known/openid-configuration":
            return self.answer(200, {
                "issuer": iss.url,
                "jwks_uri": iss.url + "/jwks",
                "authorization_endpoint": iss.url + "/authorize",
                "token_endpoint": iss.url + "/token",
                "device_authorization_endpoint": iss.url + "/device_authorization",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "grant_types_supported": ["authorization_code",
                                          "urn:ietf:params:oauth:grant-type:device_code"],
                "code_challenge_methods_supported": ["S256"],
            })
        if url.path == "/jwks":
            with iss.lock:
                iss.jwks_fetches += 1
            return self.answer(200, iss.keys.jwks())
        if url.path == "/device":
            with iss.lock:
                for device in iss.devices.values():
                    if device["user_code"] == query.get("user_code"):
                        if query.get("login") not in iss.users:
                            return self.answer(403, {"error": "unknown user"})
                        device["state"] = "denied" if query.get("deny") else "approved"
                        device["user"] = query.get("login")
                        return self.answer(200, {"approved": device["state"] == "approved"})
            return self.answer(404, {"error": "no such user_code"})
        if url.path == "/authorize":
            if query.get("client_id") != iss.client_id or query.get("response_type") != "code":
                return self.answer(400, {"error": "invalid_request"})
            if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
                return self.answer(400, {"error": "invalid_request",
                                         "error_description": "PKCE S256 is required"})
            hidden = "".join('<input type="hidden" name="%s" value="%s">' % (
                html.escape(k), html.escape(v)) for k, v in query.items())
            page = ("<!doctype html><title>Test issuer: sign in</title><h1>TEST ISSUER</h1>"
                    '<form method="post" action="/authorize">%s<label for="login">User</label>'
                    '<input id="login" name="login"><button type="submit">Sign in</button>'
                    "</form>") % hidden
            return self.answer(200, page.encode(), "text/html; charset=utf-8")
        if url.path == "/test/stats":
            with iss.lock:
                return self.answer(200, {"jwksFetches": iss.jwks_fetches})
        return self.answer(404, {"error": "not found"})

    def do_POST(self):
        iss = self.issuer
        path = urllib.parse.urlparse(self.path).path
        body = self.form()
        if path == "/device_authorization":
            if body.get("client_id") != iss.client_id:
                return self.answer(401, {"error": "invalid_client"})
            device_code = secrets.token_urlsafe(24)
            user_code = "%s-%s" % (secrets.token_hex(2).upper(), secrets.token_hex(2).upper())
            with iss.lock:
                iss.devices[device_code] = {"user_code": user_code, "state": "pending",
                                            "user": None}
            return self.answer(200, {
                "device_code": device_code,
                "user_code": user_code,
                "verification_uri": iss.url + "/device",
                "verification_uri_complete": iss.url + "/device?user_code=" + user_code,
                "expires_in": 120,
                "interval": 1,
            })
        if path == "/authorize":
            if body.get("login") not in iss.users:
                return self.answer(403, b"unknown user", "text/plain")
            code = secrets.token_urlsafe(24)
            with iss.lock:
                iss.codes[code] = {"user": body["login"], "redirect_uri": body.get("redirect_uri"),
                                   "challenge": body.get("code_challenge"),
                                   "nonce": body.get("nonce")}
            target = body.get("redirect_uri", "") + "?" + urllib.parse.urlencode(
                {"code": code, "state": body.get("state", "")})
            return self.answer(302, b"", "text/plain", location=target)
        if path == "/token" and body.get("grant_type") == "authorization_code":
            with iss.lock:
                grant = iss.codes.pop(body.get("code"), None)  # a code is good once
            if grant is None or body.get("client_id") != iss.client_id:
                return self.answer(400, {"error": "invalid_grant"})
            if body.get("redirect_uri") != grant["redirect_uri"]:
                return self.answer(400, {"error": "invalid_grant",
                                         "error_description": "redirect_uri differs"})
            verifier = body.get("code_verifier", "")
            if b64url(hashlib.sha256(verifier.encode()).digest()) != grant["challenge"]:
                return self.answer(400, {"error": "invalid_grant",
                                         "error_description": "PKCE verifier does not match"})
            return self.answer(200, {
                "access_token": secrets.token_urlsafe(32),
                "token_type": "Bearer",
                "expires_in": 600,
                "id_token": iss.sign(iss.claims(grant["user"], grant["nonce"])),
            })
        if path == "/token":
            if body.get("client_id") != iss.client_id:
                return self.answer(401, {"error": "invalid_client"})
            if body.get("grant_type") != "urn:ietf:params:oauth:grant-type:device_code":
                return self.answer(400, {"error": "unsupported_grant_type"})
            with iss.lock:
                device = iss.devices.get(body.get("device_code"))
                if device is None:
                    return self.answer(400, {"error": "invalid_grant"})
                if device["state"] == "pending":
                    return self.answer(400, {"error": "authorization_pending"})
                del iss.devices[body.get("device_code")]  # a device code is good once
            if device["state"] == "denied":
                return self.answer(400, {"error": "access_denied"})
            return self.answer(200, {
                "access_token": secrets.token_urlsafe(32),
                "token_type": "Bearer",
                "expires_in": 600,
                "id_token": iss.sign(iss.claims(device["user"])),
            })
        if path == "/test/mint":
            claims = iss.claims(body.get("user", "alice"))
            claims.update(body.get("claims", {}))
            for name in body.get("drop", []):
                claims.pop(name, None)
            return self.answer(200, {"token": iss.sign(
                claims, body.get("kid"), body.get("alg", "RS256"), body.get("key", "current"),
                body.get("tamper", False))})
        if path == "/test/rotate":
            return self.answer(200, {"kid": iss.keys.rotate(bool(body.get("retire")))})
        return self.answer(404, {"error": "not found"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--users", default="{}", help="JSON: user -> list of groups")
    args = parser.parse_args()
    issuer = Issuer(args.client_id, json.loads(args.users))
    Handler.issuer = issuer
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    issuer.url = "http://127.0.0.1:%d" % server.server_address[1]
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
