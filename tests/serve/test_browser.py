"""datapipe serve in a real browser: Debian's headless Chromium (through chromium-driver, driven by
Selenium) against `datapipe serve` on 127.0.0.1. Every page loads without a console error (a CSP
violation would be one), thumbnails decode, the key search and the grid's pages work, the diff shows
both sides of a changed sample; screenshots go to the test's tmp_path."""

import re
import shutil
import subprocess

import pytest
from helpers.cli import INSTALLED

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module", autouse=True)
def _chromium():
    """A missing browser fails these tests, naming what to install: a skip would hide the browser
    check."""
    if CHROMIUM is None or DRIVER is None:
        pytest.fail(
            "needs Debian's chromium and chromium-driver: apt-get install chromium chromium-driver "
            "(.ci/run installs them)",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def server(store):
    proc = subprocess.Popen(
        [str(INSTALLED), "serve", store.url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline())
        assert url, proc.stderr.read()
        yield url.group(0).rstrip("/")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--no-proxy-server",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def visit(browser, url: str) -> None:
    browser.get(url)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{url}: console errors {errors}"
    assert "Not found" not in browser.title and "error" not in browser.title


def test_every_page_loads_without_console_errors_and_thumbnails_render(
    browser, server, store, tmp_path
):
    from selenium.webdriver.common.by import By

    v = store.resolve("shapes", "latest")
    visit(browser, server + "/")
    assert "shapes" in browser.find_element(By.TAG_NAME, "table").text
    browser.find_element(By.LINK_TEXT, "shapes").click()
    assert browser.current_url == server + "/d/shapes"
    visit(browser, server + "/d/shapes")
    assert "+4" in browser.page_source
    visit(browser, f"{server}/d/shapes/v/{v}")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart rect")
    browser.save_screenshot(str(tmp_path / "version.png"))
    visit(browser, f"{server}/d/shapes/v/{v}/samples")
    images = browser.find_elements(By.CSS_SELECTOR, ".cell img")
    assert len(images) == 24
    widths = browser.execute_script(
        "return Array.from(document.images).map(i => i.complete ? i.naturalWidth : -1)"
    )
    assert widths and all(w > 0 for w in widths), widths
    browser.save_screenshot(str(tmp_path / "samples.png"))
    visit(browser, f"{server}/d/shapes/v/{v}/s/1/2")
    assert "shape010" in browser.find_element(By.TAG_NAME, "h1").text
    visit(browser, f"{server}/d/shapes/v/{v}/quarantine")
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.rejects tbody tr")) == 3
    visit(browser, f"{server}/d/shapes/diff")
    assert "~1 changed" in browser.page_source
    sides = browser.execute_script(
        "return Array.from(document.querySelectorAll('.sides img')).map(i => "
        "i.complete ? i.naturalWidth : -1)"
    )
    assert len(sides) == 2 and all(w > 0 for w in sides), sides
    assert (tmp_path / "version.png").stat().st_size > 1000 and (
        tmp_path / "samples.png"
    ).stat().st_size > 1000


def test_the_key_search_narrows_the_grid(browser, server, store):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    visit(browser, f"{server}/d/shapes/v/{store.resolve('shapes', 'latest')}/samples")
    box = browser.find_element(By.NAME, "q")
    box.send_keys("shape02")
    box.submit()
    # submit returns once the form is sent, not when the answer has loaded
    WebDriverWait(browser, 30).until(
        lambda d: (
            "q=shape02" in d.current_url
            and d.execute_script("return document.readyState") == "complete"
        )
    )
    keys = [a.text for a in browser.find_elements(By.CSS_SELECTOR, ".cell .key")]
    assert keys == ["shape020", "shape021", "shape022", "shape023"]
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_next_pages_through_the_grid(browser, server, store):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    visit(browser, f"{server}/d/many/v/{store.resolve('many', 'latest')}/samples")
    assert browser.find_elements(By.CSS_SELECTOR, ".cell .key")[0].text == "m000"
    browser.find_element(By.CSS_SELECTOR, 'a[rel="next"]').click()
    WebDriverWait(browser, 30).until(
        lambda d: (
            "page=1" in d.current_url
            and d.execute_script("return document.readyState") == "complete"
        )
    )
    keys = [a.text for a in browser.find_elements(By.CSS_SELECTOR, ".cell .key")]
    assert keys == [f"m{i:03d}" for i in range(48, 96)]
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
