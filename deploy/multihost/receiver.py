"""The webhook receiver host of the multi-host test: answers every POST 200 and remembers each
delivery's idempotency-key and arrival time; GET /stats reports them.

    python3 receiver.py ADDRESS PORT
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
# idempotency-key -> arrival times (monotonic seconds)
arrivals: dict[str, list[float]] = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        key = self.headers.get("idempotency-key") or ""
        with lock:
            arrivals.setdefault(key, []).append(time.monotonic())
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        with lock:
            repeated = {k: v for k, v in arrivals.items() if len(v) > 1}
            stats = {
                "deliveries": sum(len(v) for v in arrivals.values()),
                "distinct": len(arrivals),
                "duplicates": sum(len(v) - 1 for v in repeated.values()),
                # Seconds between the first and the second arrival of each repeated key.
                "duplicate_gaps": sorted(round(v[1] - v[0], 3) for v in repeated.values()),
            }
        body = json.dumps(stats).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


if __name__ == "__main__":
    Server((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
