#!/usr/bin/env python3
"""A webhook receiver for the README's walkthrough: prints each notification Custodian delivers
(its signature header and JSON body) and answers 200. Usage: python3 examples/receiver.py [PORT]"""

import http.server
import json
import sys


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            shown = json.dumps(json.loads(body), indent=2)
        except ValueError:
            shown = body.decode("utf-8", "replace")
        print(f"received {self.path} X-Signature-SHA256: {self.headers.get('X-Signature-SHA256')}\n{shown}", flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"received": true}')

    def log_message(self, *args):
        pass


port = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
print(f"receiver listening on http://127.0.0.1:{port}/", flush=True)
http.server.HTTPServer(("127.0.0.1", port), Receiver).serve_forever()
