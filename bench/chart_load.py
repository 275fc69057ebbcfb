"""Chart pages in a real browser, cold cache, against a running server (`make run`).

    python -m bench.chart_load [--base-url http://127.0.0.1:8000] [--runs 8]

For each page (progress, a finished lab run if the demo learner has one, a mock loop) and each
round, a fresh browser context (empty cache, as a first visit) loads the page and waits until
every chart on it has drawn (plotly's .main-svg); "warm" loads it a second time in a context
that has just loaded it (caches filled, as on a learner's next visit). Two ways side by side, alternating:
- ours: what the server sends now (plotly's basic bundle, brotli when the browser accepts it);
- before: the same page with the plotly script answered by the full 4.8 MB bundle the
  `plotly` package ships, uncompressed — what `make run` sent before issue 22 (the route is
  fulfilled by Playwright from the local file, so no network is involved either way).
Target (issue 22): ours ≤ 500 ms on loopback.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from pathlib import Path

import plotly
from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
FULL_BUNDLE = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
TARGET_MS = 500


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chart_load", description=__doc__)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--username", default="learner")
    parser.add_argument("--password", default="learn-inference-2026")
    args = parser.parse_args(argv)
    base = args.base_url.rstrip("/")
    full = FULL_BUNDLE.read_bytes()
    times: dict[tuple[str, str], list[float]] = {}
    sizes: dict[str, int] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        login = browser.new_context()
        page = login.new_page()
        page.goto(f"{base}/accounts/login/")
        page.get_by_label("Username").fill(args.username)
        page.get_by_label("Password").fill(args.password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_load_state()
        state = login.storage_state()
        pages = ["/progress/"]
        page.goto(f"{base}/lab/runs/")
        run = page.locator("a[href^='/lab/runs/'][href$='/']").first
        if run.count():
            pages.append(run.get_attribute("href"))
        page.goto(f"{base}/mock/")
        loop = page.locator("a[href^='/mock/loops/']").first
        if loop.count():
            pages.append(loop.get_attribute("href"))
        login.close()

        def load(url: str, way: str, warm: bool = False) -> float:
            context = browser.new_context(storage_state=state)
            if warm:  # a learner's next visit: the same browser, plotly already fetched
                context.new_page().goto(base + url)
            if way == "before":
                context.route(
                    "**/static/vendor/plotly-basic.min.js",
                    lambda route: route.fulfill(
                        status=200, body=full, headers={"Content-Type": "text/javascript"}
                    ),
                )
            tab = context.new_page()
            got = {}
            tab.on(
                "response",
                lambda r: (
                    got.setdefault("bytes", r.headers.get("content-length"))
                    if "plotly" in r.url
                    else None
                ),
            )
            started = time.perf_counter()
            tab.goto(base + url)
            charts = tab.locator(".chart").count()
            tab.wait_for_function(
                "(n) => document.querySelectorAll('.chart .main-svg').length >= n",
                arg=charts,
                timeout=30_000,
            )
            elapsed = (time.perf_counter() - started) * 1000
            if got.get("bytes"):
                sizes[way] = int(got["bytes"])
            context.close()
            return elapsed

        for url in pages:  # one warm-up each: server caches, first template compile
            load(url, "ours")
        for _ in range(args.runs):
            for url in pages:
                for way in ("before", "ours"):
                    times.setdefault((url, way), []).append(load(url, way))
                times.setdefault((url, "ours warm"), []).append(load(url, "ours", warm=True))
        browser.close()
    now = datetime.datetime.now().isoformat(timespec="seconds")
    print(
        f"# python -m bench.chart_load --runs {args.runs} ({now}); load average "
        f"{os.getloadavg()[0]:.1f}; plotly on the wire: ours "
        f"{sizes.get('ours', 0) / 1024:,.0f} KiB, before {len(full) / 1024:,.0f} KiB\n"
    )
    print(
        "| page | before: median ms | ours, cold: median ms | ours, cold: max ms | "
        "ours / before | ours, warm: median ms | target |"
    )
    print("|---|---|---|---|---|---|---|")
    worst = worst_warm = 0.0
    for url in pages:
        before, ours = times[(url, "before")], times[(url, "ours")]
        warm = times[(url, "ours warm")]
        worst = max(worst, statistics.median(ours))
        worst_warm = max(worst_warm, statistics.median(warm))
        print(
            f"| {url} | {statistics.median(before):.0f} | {statistics.median(ours):.0f} | "
            f"{max(ours):.0f} | {statistics.median(ours) / statistics.median(before):.2f} | "
            f"{statistics.median(warm):.0f} | ≤ {TARGET_MS} |"
        )
    cold = "meets" if worst <= TARGET_MS else "misses"
    hot = "meets" if worst_warm <= TARGET_MS else "misses"
    print(
        f"\nLoad until every chart drew. Cold cache (first visit): the slowest page's median "
        f"{cold} the target; warm (the next visit in the same browser): {hot} it."
    )


if __name__ == "__main__":
    main()
