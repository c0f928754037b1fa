"""(w) Hostile web servers in one `zhiku ingest` of URLs, from a server on 127.0.0.1: a page that redirects to
itself forever, one that serves 5 GB (read up to loaders.max_file_mb, 100 MiB, then dropped), one that trickles a
byte a second (cut off after 20 s) and a good page. Each bad URL is one line, the good page is indexed, peak RSS
≤ 1 GB. The short version: the redirect loop, a 200 MiB page and the good page."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rel_common import SIZES, report, run, zhiku_env

MIB = 1024 * 1024


class Hostile(BaseHTTPRequestHandler):
    huge_mib = 0

    def do_GET(self) -> None:
        if self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
            return
        self.send_response(200 if self.path != "/robots.txt" else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        try:
            if self.path == "/huge.html":
                self.send_header("Content-Length", str(self.huge_mib * MIB))
                self.end_headers()
                for _ in range(self.huge_mib):
                    self.wfile.write(b"<p>" + b"x" * (MIB - 3))
            elif self.path == "/slow.html":
                self.end_headers()
                for _ in range(120):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(1)
            else:
                self.end_headers()
                self.wfile.write("<main><h1>值班表</h1><p>周末由运维组轮流值班。</p></main>".encode())
        except OSError:  # the client hung up: what is being tested
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@SIZES
def test_hostile_web_servers_in_one_batch(
    full: bool, server: ThreadingHTTPServer, tmp_path: Path, embed_cache_dir: Path
) -> None:
    Hostile.huge_mib = 5 * 1024 if full else 200
    base = f"http://127.0.0.1:{server.server_address[1]}"
    urls = [f"{base}/loop", f"{base}/huge.html", *([f"{base}/slow.html"] if full else []), f"{base}/good.html"]
    done = run(["ingest", *urls, "--index", str(tmp_path / "idx"), "--json"], zhiku_env(embed_cache_dir), 600)
    result = json.loads(done.stdout)
    reasons = {f["path"].removeprefix(base): f["reason"] for f in result["failures"]}
    report(
        "web" if full else "web (short)",
        huge_mib=Hostile.huge_mib,
        added=result["added"],
        failed=result["failed"],
        seconds=round(done.seconds, 1),
        peak_rss_mb=round(done.peak_rss_mb, 1),
        tracebacks=done.stderr.count("Traceback"),
    )
    assert done.rc == 1 and not done.timed_out and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert result["added"] == 1
    assert reasons == {
        "/loop": "HTTP 302: The HTTP server returned a redirect error that would lead to an infinite loop. The last "
        "30x error message was: Found",
        "/huge.html": "over 100 MiB (loaders.max_file_mb): not read further",
        **({"/slow.html": "not downloaded in 20 s"} if full else {}),
    }
    assert done.peak_rss_mb <= 1024
