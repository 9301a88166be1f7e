"""A minimal headless-Chromium driver over the DevTools protocol (CDP), for the report-site tests.

Debian's ``chromium`` runs headless with ``--remote-debugging-port=0``; the port it picked is in
``<user-data-dir>/DevToolsActivePort``. One page target is driven over a websocket (``websockets``' sync client,
installed with Prefect): console messages, uncaught exceptions, log entries (failed resource loads) and every network
request are recorded per navigation; screenshots are full-page PNGs at a given CSS width.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """``with Browser(tmp) as b: page = b.open(url, width)``: one headless Chromium process, one page."""

    def __init__(self, workdir: Path, executable: str | None = None) -> None:
        self.exe = executable or find_chromium()
        if self.exe is None:
            raise RuntimeError("no chromium executable found")
        workdir.mkdir(parents=True, exist_ok=True)
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=workdir))  # fresh: no stale port file
        self.proc: subprocess.Popen[bytes] | None = None
        self.ws: Any = None
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        args = [
            self.exe,
            "--headless=new",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            f"--user-data-dir={self.profile}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit code {self.proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets: list[dict[str, Any]] = []
        while not targets:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                targets = [t for t in json.load(r) if t.get("type") == "page"]
            if not targets:
                time.sleep(0.1)
        from websockets.sync.client import connect

        self.ws = connect(targets[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def call(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """Send one CDP command and return its result; events received meanwhile are kept in ``events``."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def _wait_event(self, method: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(e["method"] == method for e in self.events):
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if "method" in msg:
                self.events.append(msg)

    def open(self, url: str, width: int, height: int = 900) -> Page:
        """Navigate to ``url`` in a ``width`` x ``height`` viewport (CSS pixels, mobile layout below 600 px) and wait
        for its load event; the returned Page holds what happened during the load."""
        self.call(
            "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=width < 600
        )
        self.events = []
        self.call("Page.navigate", url=url)
        self._wait_event("Page.loadEventFired")
        self.call("Runtime.evaluate", expression="1")  # flush events of the load
        return Page(self, url, width, list(self.events))

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression[:80]}: {res['exceptionDetails']}")
        return res["result"].get("value")


class Page:
    def __init__(self, browser: Browser, url: str, width: int, events: list[dict[str, Any]]) -> None:
        self.browser, self.url, self.width, self.events = browser, url, width, events

    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, error log entries (a missing image, a blocked load)."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('text')}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry']['text']} ({p['entry'].get('url')})")
            elif e["method"] == "Network.loadingFailed":
                out.append(f"load failed: {p.get('errorText')} ({p.get('type')})")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: Path) -> Path:
        """A full-page PNG of the page at its width."""
        metrics = self.browser.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        height = min(int(size["height"]) + 1, 16000)
        self.browser.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=height,
            deviceScaleFactor=1,
            mobile=self.width < 600,
        )
        shot = self.browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


def environment_says_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
