"""The dashboard in a real headless browser (Debian's chromium and chromedriver, Selenium)
against a real nameserver and broker: every page loads, a topic is created, a message
sent from the form is found by its key, a group's offset is reset after a preview, and
the charts draw points. Each page's screenshot is saved under the test's tmp path (the
path is printed at the start).

The browser is required, not optional: without ``chromium`` and ``chromedriver`` these
tests fail saying how to install them (``./dev.sh test`` does it when run as root).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashkit import ADMIN_KEYS, READER_KEYS, ThreadedCluster
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait
from waitkit import eventually, eventually_sync

from pocketmq.client import Message, Producer
from pocketmq.client.admin import AdminClient
from pocketmq.client.admin_model import TopicConfig

WAIT_S = 30  # deadline of each wait for the page (the machine may be loaded)
INSTALL_HINT = (
    "the dashboard's browser tests need Debian's chromium and chromedriver: "
    "run ./dev.sh test as root (it installs them), or "
    "`apt-get install -y chromium chromium-driver`"
)


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or (
            f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None
        )
        if found:
            return found
    pytest.fail(f"{' / '.join(names)} not found; {INSTALL_HINT}", pytrace=False)


def new_browser() -> Any:
    options = Options()
    options.binary_location = _binary("chromium", "chromium-browser")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(_binary("chromedriver")), options=options)
    driver.set_page_load_timeout(WAIT_S)
    return driver


@pytest.fixture(scope="module")
def shots(tmp_path_factory, pytestconfig) -> Path:
    directory = tmp_path_factory.mktemp("dashboard-screenshots")
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # shown even when output is captured
        print(f"\ndashboard screenshots: {directory}", flush=True)
    return directory


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = new_browser()
    yield driver
    driver.quit()


def _running(tmp_path_factory, **options: Any) -> Iterator[ThreadedCluster]:
    threaded = ThreadedCluster(tmp_path_factory.mktemp("dash-browser"), interval_s=0.5, **options)
    threaded.start()
    try:
        yield threaded
    finally:
        threaded.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ThreadedCluster]:
    yield from _running(tmp_path_factory)


def wait(driver: Any, condition: Any, what: str) -> Any:
    """Poll *condition* until it is truthy. The pages redraw their tables on a timer, so an
    element found in one poll may be replaced before it is read: that poll is retried."""
    try:
        return WebDriverWait(
            driver, WAIT_S, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
        ).until(lambda d: condition(d))
    except TimeoutException:
        text = driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(
            f"{what} did not happen within {WAIT_S} s; the page at "
            f"{driver.current_url} shows:\n{text}"
        ) from None


def element(driver: Any, css: str) -> Any:
    return wait(
        driver,
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, css) and d.find_elements(By.CSS_SELECTOR, css)[0]
        ),
        f"element {css}",
    )


def page_errors(driver: Any) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#errors .error")]


def open_page(driver: Any, cluster: ThreadedCluster, route: str, ready_css: str) -> Any:
    """Load the page afresh (a new hash alone on the same URL would not reload it)."""
    driver.get("about:blank")
    driver.get(f"{cluster.cluster.url}/#/{route}")
    return element(driver, ready_css)


# -- the cluster, as a test prepares it -------------------------------------------------------
def admin_call(cluster: ThreadedCluster, fn: Any) -> Any:
    async def call() -> Any:
        async with AdminClient(
            cluster.cluster.namesrv_addr, access_key=cluster.keys[0], secret_key=cluster.keys[1]
        ) as admin:
            return await fn(admin)

    return cluster.run(call())


def make_topic(cluster: ThreadedCluster, topic: str, queues: int = 2) -> None:
    addr = cluster.cluster.broker.address
    admin_call(
        cluster,
        lambda a: a.create_topic(
            addr, TopicConfig(topic=topic, read_queue_nums=queues, write_queue_nums=queues)
        ),
    )

    async def routed() -> None:  # until the nameserver routes it
        async with AdminClient(
            cluster.cluster.namesrv_addr, access_key=cluster.keys[0], secret_key=cluster.keys[1]
        ) as admin:

            async def listed() -> bool:
                return topic in await admin.topic_list()

            await eventually(listed, timeout_s=10, interval_s=0.05, what=f"route of {topic}")

    cluster.run(routed())


def send(cluster: ThreadedCluster, topic: str, count: int) -> None:
    async def go() -> None:
        async with Producer(
            group="browser-test-pg",
            namesrv=cluster.cluster.namesrv_addr,
            access_key=cluster.keys[0],
            secret_key=cluster.keys[1],
        ) as p:
            for i in range(count):
                await p.send(
                    Message(topic=topic, body=f"message {i}".encode(), keys=[f"{topic}-{i}"])
                )

    cluster.run(go())


def commit_to_end(cluster: ThreadedCluster, group: str, topic: str) -> None:
    async def go(admin: AdminClient) -> None:
        broker = admin.broker(cluster.cluster.broker.address)
        for queue in (await admin.topic_route(topic)).read_queues():
            await broker.update_consumer_offset(group, queue, await broker.max_offset(queue))

    admin_call(cluster, go)


# -- tests ------------------------------------------------------------------------------------
def test_every_page_loads_without_an_error(browser, cluster, shots):
    make_topic(cluster, "browse")
    send(cluster, "browse", 3)
    commit_to_end(cluster, "browsers", "browse")
    found = admin_call(cluster, lambda a: a.query_message("browse", "browse-0"))
    pages = [
        ("cluster", "cluster", "#brokers"),
        ("topics", "topics", "#topics"),
        ("topic", "topic/browse", "#queues"),
        ("groups", "groups", "#groups"),
        ("group", "group/browsers", "#progress"),
        ("messages", "messages", "#by-key"),
        ("message", f"message/{found[0].offset_msg_id}", "#properties"),
        ("dlq", "dlq?group=browsers", "#dlq-messages"),
        ("traces", f"traces?id={found[0].msg_id}", "#trace-list p"),
    ]
    for name, route, ready in pages:
        open_page(browser, cluster, route, ready)
        assert browser.find_element(By.TAG_NAME, "h1").text, name
        assert page_errors(browser) == [], name
        browser.save_screenshot(str(shots / f"{name}.png"))
    assert sorted(p.name for p in shots.glob("*.png")) == sorted(f"{n}.png" for n, _, _ in pages)


def test_a_topic_created_from_the_form_exists_on_the_broker(browser, cluster):
    form = open_page(browser, cluster, "topics", "#create-topic")
    form.find_element(By.NAME, "topic").send_keys("made-in-browser")
    for field in ("read", "write"):
        box = form.find_element(By.NAME, field)
        box.clear()
        box.send_keys("3")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(
        browser,
        lambda d: "created made-in-browser" in d.find_element(By.ID, "create-topic-result").text,
        "the created notice",
    )
    wait(
        browser,
        lambda d: "made-in-browser" in d.find_element(By.ID, "topics").text,
        "the new topic in the list",
    )
    config = cluster.cluster.broker.topics.get("made-in-browser")
    assert config is not None and config.read_queue_nums == 3


def test_a_message_sent_from_the_form_is_found_by_its_key(browser, cluster, shots):
    make_topic(cluster, "browser-sends")
    form = open_page(browser, cluster, "topic/browser-sends", "#send-form")
    form.find_element(By.NAME, "body").send_keys("hello from chromium")
    form.find_element(By.NAME, "keys").send_keys("chromium-key-1")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(
        browser, lambda d: "SEND_OK" in d.find_element(By.ID, "send-result").text, "the send result"
    )
    search = open_page(browser, cluster, "messages", "#by-key")
    search.find_element(By.NAME, "topic").send_keys("browser-sends")
    search.find_element(By.NAME, "key").send_keys("chromium-key-1")
    search.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    row = wait(
        browser,
        lambda d: [
            r
            for r in d.find_elements(By.CSS_SELECTOR, "#messages tr")
            if "chromium-key-1" in r.text
        ],
        "the message in the results",
    )
    row[0].find_element(By.TAG_NAME, "a").click()
    body = element(browser, "#body-view")
    wait(browser, lambda d: body.text == "hello from chromium", "the body as text")
    browser.find_element(By.CSS_SELECTOR, "#body-tabs [data-view=hex]").click()
    wait(
        browser,
        lambda d: "68 65 6c 6c 6f" in d.find_element(By.ID, "body-view").text,
        "the body as hex",
    )
    browser.save_screenshot(str(shots / "message-sent-from-form.png"))


def test_a_groups_offset_is_reset_after_a_preview(browser, cluster, shots):
    make_topic(cluster, "replayed", queues=1)
    send(cluster, "replayed", 3)
    commit_to_end(cluster, "replayers", "replayed")
    form = open_page(browser, cluster, "group/replayers", "#reset-form")
    wait(
        browser,
        lambda d: "replayed" in form.find_element(By.NAME, "topic").text,
        "the group's topic in the reset form",
    )
    Select(form.find_element(By.NAME, "topic")).select_by_visible_text("replayed")
    Select(form.find_element(By.NAME, "kind")).select_by_visible_text("earliest")
    assert not browser.find_element(By.ID, "reset-apply").is_enabled()  # preview first
    browser.find_element(By.ID, "reset-preview").click()
    plan = element(browser, "#reset-plan")
    assert "3 message(s) to consume" in browser.find_element(By.ID, "reset-result").text
    assert plan.find_elements(By.CSS_SELECTOR, "tbody tr")
    browser.save_screenshot(str(shots / "reset-preview.png"))
    browser.find_element(By.ID, "reset-apply").click()
    wait(
        browser,
        lambda d: "reset 1 queue(s)" in d.find_element(By.ID, "reset-result").text,
        "the reset notice",
    )
    progress = admin_call(cluster, lambda a: a.consume_progress("replayers", "replayed"))
    assert [(q.consumer_offset, q.lag) for q in progress] == [(0, 3)]


def test_the_cluster_chart_draws_points_live(browser, cluster, shots):
    make_topic(cluster, "charted")
    open_page(browser, cluster, "cluster", "svg.chart")
    send(cluster, "charted", 40)

    def points(d: Any) -> int:
        charts = d.find_elements(By.CSS_SELECTOR, "svg.chart")
        return int(charts[0].get_attribute("data-points") or 0) if charts else 0

    wait(browser, lambda d: points(d) >= 6, "a chart of several samples")
    # read in one script, so that a redraw of the charts cannot fall between two reads
    drawn = browser.execute_script(
        """const charts = [...document.querySelectorAll('#tps-charts svg.chart')];
        return {labels: charts.map(c => c.getAttribute('aria-label')),
                lines: [...document.querySelectorAll('#tps-charts svg.chart polyline')].map(
                  l => [l.getAttribute('data-series'), l.getAttribute('points')]),
                dots: document.querySelectorAll('svg.chart circle.pt').length};"""
    )
    assert drawn["labels"] == ["put TPS per broker", "get TPS per broker"]
    assert [series for series, _ in drawn["lines"]] == ["broker-a/0"] * 2
    assert all(len(points.split()) >= 3 for _, points in drawn["lines"])
    assert drawn["dots"]
    browser.save_screenshot(str(shots / "cluster-chart.png"))


def test_a_topic_is_deleted_only_once_its_name_is_typed(browser, cluster):
    make_topic(cluster, "short-lived")
    open_page(browser, cluster, "topics", "#topics")

    def click_delete(d: Any) -> bool:  # found and clicked in one poll: the table redraws
        for r in d.find_elements(By.CSS_SELECTOR, "#topics tr"):
            if "short-lived" in r.text:
                r.find_element(By.CSS_SELECTOR, "[data-action=delete]").click()
                return True
        return False

    wait(browser, click_delete, "the topic's delete button")
    form = element(browser, "#delete-topic")
    form.find_element(By.NAME, "confirm").send_keys("short")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    refusal = wait(
        browser,
        lambda d: form.find_elements(By.CSS_SELECTOR, ".error"),
        "the refusal in the dialog",
    )
    assert "confirm with its name" in refusal[0].text
    assert cluster.cluster.broker.topics.get("short-lived") is not None
    form.find_element(By.NAME, "confirm").send_keys("-lived")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(
        browser,
        lambda d: "short-lived" not in d.find_element(By.ID, "topic-list").text,
        "the topic gone from the list",
    )
    assert cluster.cluster.broker.topics.get("short-lived") is None


def test_a_group_is_deleted_from_its_page_once_its_name_is_typed(browser, cluster):
    make_topic(cluster, "finished", queues=1)
    send(cluster, "finished", 1)
    commit_to_end(cluster, "leavers", "finished")
    open_page(browser, cluster, "group/leavers", "#progress")
    browser.find_element(By.ID, "delete-group").click()
    form = element(browser, "#delete-group-form")
    form.find_element(By.NAME, "confirm").send_keys("leavers")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: d.current_url.endswith("#/groups"), "the groups page after delete")
    groups = admin_call(cluster, lambda a: a.consumer_groups())
    assert "leavers" not in {g.group for g in groups}


def test_a_dead_letter_is_listed_and_resent_to_its_group(browser, cluster):
    make_topic(cluster, "poisoned", queues=1)
    send(cluster, "poisoned", 1)

    async def to_dlq(admin: AdminClient) -> str:
        (msg,) = await admin.query_message("poisoned", "poisoned-0")
        await admin.broker(cluster.cluster.broker.address).consumer_send_msg_back(
            group="poison-eaters",
            phys_offset=msg.phys_offset,
            delay_level=-1,
            origin_topic="",
            origin_msg_id=msg.msg_id,
            max_reconsume_times=1,
        )
        return msg.msg_id

    msg_id = admin_call(cluster, to_dlq)
    store = cluster.cluster.broker.store
    eventually_sync(  # the DLQ's consume queue is built by the dispatcher, after the answer
        lambda: store.max_offset("%DLQ%poison-eaters", 0) == 1,
        timeout_s=20,
        what="the dead letter dispatched",
    )
    listed = open_page(browser, cluster, "dlq?group=poison-eaters", "#dlq-messages")
    assert msg_id in listed.text
    export = browser.find_element(By.ID, "dlq-export").get_attribute("href")
    assert export.endswith("/api/dlq/export?group=poison-eaters")
    listed.find_element(By.CSS_SELECTOR, "input.pick").click()
    browser.find_element(By.ID, "dlq-resend").click()
    wait(
        browser,
        lambda d: "resent 1 of 1 to poison-eaters" in d.find_element(By.ID, "dlq-result").text,
        "the resend notice",
    )
    eventually_sync(
        lambda: store.max_offset("%RETRY%poison-eaters", 0) == 1,
        timeout_s=20,
        what="the dead letter in the group's retry topic",
    )


def test_a_missing_browser_fails_the_tests_saying_how_to_install_it():
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        _binary("no-such-browser-pocketmq")


# -- with the ACL on -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory) -> Iterator[ThreadedCluster]:
    yield from _running(tmp_path_factory, acl=True)


def log_in(driver: Any, cluster: ThreadedCluster, keys: tuple[str, str]) -> None:
    """Log out whoever is logged in (the page's own button), then log in as *keys*."""
    open_page(driver, cluster, "topics", "#login-form, #who button")
    for button in driver.find_elements(By.CSS_SELECTOR, "#who button"):
        button.click()
    form = element(driver, "#login-form")
    form.find_element(By.NAME, "access_key").send_keys(keys[0])
    form.find_element(By.NAME, "secret_key").send_keys(keys[1])
    form.find_element(By.ID, "login-button").click()
    wait(driver, lambda d: keys[0] in d.find_element(By.ID, "who").text, "the logged-in user")


def test_with_the_acl_a_read_only_user_sees_no_write_buttons(browser, acl_cluster, shots):
    make_topic(acl_cluster, "guarded")
    open_page(browser, acl_cluster, "cluster", "#login-form")
    browser.save_screenshot(str(shots / "login.png"))
    log_in(browser, acl_cluster, READER_KEYS)
    wait(browser, lambda d: "guarded" in d.find_element(By.ID, "topic-list").text, "the topic list")
    assert "read-only" in browser.find_element(By.ID, "who").text
    assert not browser.find_elements(By.ID, "create-topic")
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-action=delete]")
    log_in(browser, acl_cluster, ADMIN_KEYS)
    element(browser, "#create-topic")
    element(browser, "[data-action=delete]")


def test_with_the_acl_a_refusal_by_the_broker_shows_in_the_page(browser, acl_cluster):
    log_in(browser, acl_cluster, READER_KEYS)
    open_page(browser, acl_cluster, "topic/TBW102", "#errors .error")
    assert "refused" in page_errors(browser)[0]
    assert browser.find_element(By.TAG_NAME, "h1").text == "Topic TBW102"
