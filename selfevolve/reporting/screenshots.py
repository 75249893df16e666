"""The campaign as people meet it in the UIs, checked in a real headless browser and saved as PNG.

``campaign_pages(mlflow_url, campaign, prefect_url=None)`` names the pages (MLflow: the cycle runs,
the cycles side by side, the report's charts over the cycles, a question's trace through the roles,
the registered model with a version and an alias per cycle; Prefect: the campaign's flow-run graph and
its summary artifact) with the text each must show; ``capture(pages, out_dir)`` opens each in Chromium (headless,
driven by Selenium with Debian's ``chromium`` and ``chromium-driver``), waits until the page's DOM
holds that text, saves a screenshot and returns what it found. ``selfevolve screenshots`` runs both
against a finished campaign; the end-to-end test runs them against its own.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  "--window-size=1600,1000")


#: MLflow pages: close the assistant side panel and the shared-view banner, which cover the runs.
MLFLOW_TIDY = ("for (const b of document.querySelectorAll('button[aria-label=\"Close\"], button[aria-label=\"Hide banner\"]'))"
               " b.click();")
#: The compare page: bring its metrics table (the cycles' values side by side) into view.
SCROLL_TO_METRICS = ("const m = [...document.querySelectorAll('div,span,h1,h2,h3,h4')]"
                     ".filter(e => e.textContent.trim() === 'Metrics');"
                     " if (m.length) m[m.length - 1].scrollIntoView({block: 'start'});")

#: The report run's charts: show the held-out accuracy charts first (the metric-chart search box).
SEARCH_HELDOUT = ("const i = document.querySelector('input[placeholder=\"Search metric charts\"]');"
                  " if (i) { Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(i, 'heldout');"
                  " i.dispatchEvent(new Event('input', {bubbles: true})); }")


@dataclass
class Page:
    """One page to capture: ``name`` (the PNG's stem), ``url``, the texts its DOM must contain,
    and an optional script run once they are there (e.g. scroll to a section)."""

    name: str
    url: str
    must_show: list[str]
    script: str | None = None
    found: dict[str, bool] = field(default_factory=dict)


class BrowserUnavailable(RuntimeError):
    """No Chromium / ChromeDriver (install Debian's ``chromium`` and ``chromium-driver``) or no Selenium."""


def browser_paths() -> tuple[str, str]:
    """(chromium, chromedriver) executables. Raises ``BrowserUnavailable`` naming what is missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        raise BrowserUnavailable("headless UI checks need Chromium and ChromeDriver: apt-get install chromium chromium-driver")
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        raise BrowserUnavailable("headless UI checks need selenium (pip install selenium)") from exc
    return chromium, driver


def campaign_pages(mlflow_url: str, campaign: str, prefect_url: str | None = None, flow_run_id: str | None = None,
                   summary_id: str | None = None) -> list[Page]:
    """The pages that show a campaign (see the module docstring). ``prefect_url`` is the Prefect UI
    (``http://host:port``), ``flow_run_id`` the campaign's flow run and ``summary_id`` its summary
    artifact (``orchestration.services.campaign_records`` finds both)."""
    from selfevolve.model_registry import CHAMPION
    from selfevolve.tracking import campaign_urls

    links = campaign_urls(mlflow_url, campaign)
    pages = [Page("ui_mlflow_cycles", links["cycles"], ["Runs", "Model training", "base", "c1", "headline/frontier", "headline/pool"],
                  MLFLOW_TIDY)]
    if "compare" in links:
        pages.append(Page("ui_mlflow_compare", links["compare"], ["Comparing", "Metrics", "base", "c1"],
                          MLFLOW_TIDY + SCROLL_TO_METRICS))
    if "report" in links:
        pages.append(Page("ui_mlflow_report", links["report"], ["campaign/report", "Model metrics"],
                          MLFLOW_TIDY + SEARCH_HELDOUT))
    if "trace" in links:
        pages.append(Page("ui_mlflow_trace", links["trace"], ["question", "planner", "solver (sample 0)", "verifier"],
                          MLFLOW_TIDY))
    if "model" in links:
        pages.append(Page("ui_mlflow_model", links["model"], ["Registered Models", campaign, "Version 1", "@ base",
                                                             f"@ {CHAMPION}"], MLFLOW_TIDY))
    if prefect_url and flow_run_id:
        pages.append(Page("ui_prefect_flow_run", f"{prefect_url.rstrip('/')}/runs/flow-run/{flow_run_id}",
                          ["campaign", "Completed"]))
    if prefect_url and summary_id:
        pages.append(Page("ui_prefect_summary", f"{prefect_url.rstrip('/')}/artifacts/artifact/{summary_id}",
                          [f"Campaign {campaign}", "frontier", "Flow Run"]))
    return pages


def capture(pages: list[Page], out_dir: str | Path, timeout_s: float = 60.0) -> list[Page]:
    """Open each page headless, wait (up to ``timeout_s``) until its DOM text holds every string of
    ``must_show``, run its script, save ``out_dir/<name>.png``. ``found`` records which strings were
    seen. Raises ``BrowserUnavailable`` when there is no browser."""
    chromium, driver = browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    options = Options()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.binary_location = chromium
    browser = webdriver.Chrome(service=Service(driver), options=options)
    try:
        for page in pages:
            browser.get(page.url)
            deadline = time.time() + timeout_s
            text = ""
            while time.time() < deadline:
                text = browser.find_element("tag name", "body").text
                if all(s in text for s in page.must_show):
                    break
                time.sleep(0.5)
            page.found = {s: s in text for s in page.must_show}
            if page.script:
                browser.execute_script(page.script)
                time.sleep(1.0)
            time.sleep(1.0)  # let charts finish drawing
            browser.save_screenshot(str(out_dir / f"{page.name}.png"))
    finally:
        browser.quit()
    return pages
