"""The management web UI in a real browser (run by scripts/ui-check.sh).

Starts a StableMQ broker ($STABLEMQ_BIN serve) on free loopback ports with a
temporary data dir, drives headless Debian chromium through chromedriver with
selenium, and checks what a person would see on each page: a queue declared
over AMQP and its ready count, publish / get / purge / delete through the
queue page, a pika connection and its force close (320 CONNECTION_FORCED),
a user added in Admin logging in over AMQP, the definitions export and its
import, words for errors, and no console error on any page. Then a 3-node
cluster from examples/cluster/: the Cluster page names the master, and after
kill -9 of the master it names the new one. Screenshots of every page go to
$UI_SCREENSHOTS. Prints "ui: N passed, N failed" last; exits 1 on a failure.

Usage: test_ui.py [name-substring ...] runs only the matching tests.
"""

import base64
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

import pika
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("STABLEMQ_BIN", str(ROOT / "target/release/stablemq"))
SHOTS = Path(os.environ.get("UI_SCREENSHOTS", ROOT / "target/ui-screenshots"))
WAIT = 15.0


def free_ports(n):
    """n distinct free loopback ports from 20000-31999 (the tests' range)."""
    got = []
    for port in random.sample(range(20000, 32000), 12000):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        got.append(port)
        if len(got) == n:
            return got
    raise RuntimeError("no free ports")


class Api:
    """The management API, for setting up and checking (never for the UI's work)."""

    def __init__(self, port, user="guest", password="guest"):
        self.base = f"http://127.0.0.1:{port}"
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", self.auth)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                text = r.read()
                return r.status, (json.loads(text) if text else None), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, None, dict(e.headers)

    def get(self, path):
        status, body, _ = self.call("GET", path)
        assert status == 200, f"GET {path}: {status}"
        return body


class Broker:
    """One `stablemq serve` process, stopped by its pid."""

    def __init__(self, tmp):
        self.amqp, self.http, self.prom, stream = free_ports(4)
        self.log = open(tmp / "broker.log", "wb")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--bind", "127.0.0.1", "--amqp-port", str(self.amqp),
             "--management-port", str(self.http), "--prometheus-port", str(self.prom),
             "--stream-port", str(stream), "--data-dir", str(tmp / "data")],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.api = Api(self.http)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.api.call("GET", "/api/overview")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the broker did not start: see " + str(tmp / "broker.log"))

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


class Cluster:
    """The three nodes of examples/cluster/, on free ports and temporary data
    dirs (the configs as shipped otherwise), each stopped by its pid."""

    def __init__(self, tmp):
        ports = [free_ports(5) for _ in range(3)]
        self.procs, self.http, self.logs = {}, {}, {}
        self.configs = {}
        for i in range(1, 4):
            text = (ROOT / f"examples/cluster/node{i}.toml").read_text()
            # Every documented port (the stream ports too: a fixed one may
            # be another broker's) becomes a free one, in two passes: a free
            # port may equal a documented one, which a chain of replacements
            # would then rewrite again as another node's.
            filled = []
            for j, p in enumerate(ports):
                for k, documented in enumerate((25701, 5672, 15672, 5552)):
                    token = f"127.0.0.1:@{j}.{k}@\""
                    text = text.replace(f'127.0.0.1:{documented + j}"', token)
                    filled.append((token, f'127.0.0.1:{p[4] if k == 3 else p[k]}"'))
            for token, addr in filled:
                text = text.replace(token, addr)
            me = ports[i - 1]
            text = text.replace(f'data_dir = "./data/node{i}"', f'data_dir = "{tmp}/node{i}"')
            text = text.replace(f"prometheus_port = {15691 + i}", f"prometheus_port = {me[3]}")
            assert str(me[1]) in text and f"{tmp}/node{i}" in text, f"node{i}.toml changed its layout"
            cfg = tmp / f"node{i}.toml"
            cfg.write_text(text)
            self.configs[i] = cfg
            self.http[i] = me[2]
        for i in range(1, 4):
            self.logs[i] = open(tmp / f"node{i}.log", "wb")
            self.procs[i] = subprocess.Popen(
                [BIN, "serve", "--config", str(self.configs[i]), "--bind", "127.0.0.1"],
                stdout=self.logs[i], stderr=subprocess.STDOUT)

    def master(self, asking, timeout=40):
        """The master's node name as node `asking` reports it, once there is one."""
        api = Api(self.http[asking])
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                status, nodes, _ = api.call("GET", "/api/nodes")
                if status == 200:
                    m = [n for n in nodes if n["role"] == "master" and n["running"]]
                    if m:
                        return m[0]
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError("no master elected")

    def kill9(self, i):
        os.kill(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].wait(5)

    def stop(self):
        for i, p in self.procs.items():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for i, p in self.procs.items():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(5)
            self.logs[i].close()


class Browser:
    """Headless chromium through chromedriver, offline, with a fresh profile."""

    def __init__(self, tmp):
        self.profile = tempfile.mkdtemp(prefix="ui-chrome-", dir=tmp)
        self.downloads = tmp / "downloads"
        self.downloads.mkdir(exist_ok=True)
        o = webdriver.ChromeOptions()
        o.binary_location = "/usr/bin/chromium"
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--disable-default-apps", "--disable-extensions",
                  f"--user-data-dir={self.profile}", "--window-size=1280,800"]:
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        o.add_experimental_option("prefs", {"download.default_directory": str(self.downloads),
                                            "download.prompt_for_download": False})
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
        self.driver.set_window_size(1280, 800)
        self.driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                                    {"behavior": "allow", "downloadPath": str(self.downloads)})
        self.base = None

    # --- finding and waiting ---------------------------------------------------
    def until(self, what, fn, timeout=WAIT):
        """Wait until fn() is truthy; fail naming `what`."""
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.2,
                                 ignored_exceptions=(WebDriverException,)).until(lambda _d: fn())
        except TimeoutException:
            raise AssertionError(f"timed out waiting for {what}; status box: {self.status()!r}") from None

    def css(self, sel):
        return self.driver.find_element(By.CSS_SELECTOR, sel)

    def text(self, sel):
        els = self.driver.find_elements(By.CSS_SELECTOR, sel)
        return els[0].text if els else ""

    def status(self):
        try:
            return self.text("#status")
        except WebDriverException:
            return "?"

    def go(self, hash_, heading):
        self.driver.get(self.base + "/" + hash_)
        self.until(f"the {heading!r} heading", lambda: heading in self.text("main h1"))

    def fill(self, form, name, value):
        el = self.css(f"{form} [name='{name}']")
        if el.tag_name == "select":
            Select(el).select_by_value(value)
        else:
            el.clear()
            el.send_keys(value)

    def submit(self, form, expect):
        """Press the form's submit button; wait for its result box to say `expect`."""
        self.css(f"{form} button[type=submit]").click()
        self.accept_confirm()
        self.until(f"{form} to say {expect!r}", lambda: expect in self.text(f"{form} .form-result"))

    def accept_confirm(self):
        try:
            WebDriverWait(self.driver, 1).until(lambda d: d.switch_to.alert).accept()
        except (TimeoutException, NoAlertPresentException):
            pass

    # --- logs and screenshots ----------------------------------------------------
    def logs(self):
        return self.driver.get_log("browser")

    def js_errors(self, allow_network=False):
        """SEVERE console entries since the last call (network ones allowed if asked)."""
        out = []
        for e in self.logs():
            if e["level"] != "SEVERE":
                continue
            if allow_network and e.get("source") == "network":
                continue
            out.append(e["message"])
        return out

    def shot(self, name):
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(SHOTS / f"{name}.png"))

    def quit(self):
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)


# --- the tests ---------------------------------------------------------------------
# Each takes the context (broker, browser) and runs in this order: later ones rely
# on the login of test_login.

def test_serves_page_and_assets(ctx):
    api = ctx.broker.api
    with urllib.request.urlopen(api.base + "/", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/html"), r.headers["Content-Type"]
        assert b'src="/ui/app.js"' in r.read()
    for name, ctype in [("app.js", "text/javascript"), ("app.css", "text/css"), ("queue.js", "text/javascript")]:
        with urllib.request.urlopen(f"{api.base}/ui/{name}", timeout=5) as r:
            assert r.headers["Content-Type"].startswith(ctype), (name, r.headers["Content-Type"])
    try:
        urllib.request.urlopen(api.base + "/ui/nope.js", timeout=5)
        raise AssertionError("/ui/nope.js answered")
    except urllib.error.HTTPError as e:
        assert e.code == 404
    # The API still answers JSON 404 past the UI's paths.
    assert api.call("GET", "/api/nope")[0] == 404


def test_login_refusals(ctx):
    b, api = ctx.browser, ctx.broker.api
    status, _, _ = api.call("PUT", "/api/users/ui-notags", {"password": "pw", "tags": ""})
    assert status in (201, 204), status
    b.driver.get(b.base + "/")
    b.until("the login form", lambda: b.driver.find_elements(By.ID, "login-form"))
    b.shot("01-login")
    b.fill("#login-form", "username", "guest")
    b.fill("#login-form", "password", "wrong")
    b.css("#login-form button[type=submit]").click()
    b.until("'Login failed'", lambda: "Login failed" in b.text("#login-form"))
    b.fill("#login-form", "username", "ui-notags")
    b.fill("#login-form", "password", "pw")
    b.css("#login-form button[type=submit]").click()
    b.until("'Not management user'", lambda: "Not management user" in b.text("#login-form"))
    assert not b.css("#top").is_displayed(), "the header shows before a login"
    # The refusals are 401 answers (network entries); nothing else may be logged.
    errors = b.js_errors(allow_network=True)
    assert not errors, errors


def login(b, user="guest", password="guest"):
    b.driver.get(b.base + "/")
    b.until("the login form", lambda: b.driver.find_elements(By.ID, "login-form"))
    b.fill("#login-form", "username", user)
    b.fill("#login-form", "password", password)
    b.css("#login-form button[type=submit]").click()
    b.until("the Overview page", lambda: "Overview" in b.text("main h1"))


def test_login_and_overview(ctx):
    b = ctx.browser
    login(b)
    assert "guest" in b.text("#who")
    b.until("the totals", lambda: "Queues" in b.text("#totals"))
    b.until("the node table", lambda: "rabbit@" in b.text("#nodes") or "stablemq" in b.text("#nodes"))
    b.until("the listeners", lambda: "amqp" in b.text("#listeners"))
    assert b.driver.find_elements(By.CSS_SELECTOR, ".chart svg polyline"), "no rate chart drawn"
    assert b.js_errors() == []


def queue_row(b, name):
    for row in b.driver.find_elements(By.CSS_SELECTOR, "#queue-list tbody tr"):
        cells = row.find_elements(By.TAG_NAME, "td")
        if len(cells) > 5 and cells[1].text == name:
            return [c.text for c in cells]
    return None


def test_queue_from_amqp_publish_get_purge_delete(ctx):
    b = ctx.browser
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", ctx.broker.amqp))
    ch = conn.channel()
    ch.queue_declare("ui-q", durable=True)
    for i in range(2):
        ch.basic_publish("", "ui-q", f"amqp body {i}".encode())
    conn.close()
    b.go("#/queues", "Queues")
    b.fill("#main form[role=search]", "filter", "^ui-q$")
    b.css("#main form[role=search] [name=regex]").click()
    b.css("#main form[role=search] button[type=submit]").click()
    b.until("ui-q with 2 ready", lambda: (queue_row(b, "ui-q") or [None] * 6)[5] == "2")
    b.shot("04-queues")
    b.driver.find_element(By.LINK_TEXT, "ui-q").click()
    b.until("the queue page", lambda: b.text("#queue-name") == "ui-q")
    b.until("ready 2 on the queue page", lambda: b.text("#q-ready") == "2")
    b.fill("#publish-form", "payload", "hello from the browser")
    b.fill("#publish-form", "delivery_mode", "2")
    b.submit("#publish-form", "Message published.")
    b.until("ready 3 after publishing", lambda: b.text("#q-ready") == "3")
    b.fill("#get-form", "count", "3")
    b.submit("#get-form", "3 messages fetched.")
    got = b.text("#got-messages")
    assert "hello from the browser" in got and "amqp body 0" in got, got
    b.until("ready 3 after a requeueing get", lambda: b.text("#q-ready") == "3")
    b.shot("05-queue")
    b.submit("#purge-form", "purged")
    b.until("ready 0 after purge", lambda: b.text("#q-ready") == "0")
    b.css("#delete-form button[type=submit]").click()
    b.accept_confirm()
    b.until("back on Queues", lambda: b.text("main h1") == "Queues")
    assert ctx.broker.api.call("GET", "/api/queues/%2F/ui-q")[0] == 404, "the queue was not deleted"
    b.until("ui-q gone from the list", lambda: queue_row(b, "ui-q") is None)
    assert b.js_errors() == []


def test_add_queue_with_arguments_and_paging(ctx):
    b, api = ctx.browser, ctx.broker.api
    b.go("#/queues", "Queues")
    b.fill("#add-queue", "name", "ui-args")
    b.fill("#add-queue", "arguments", "x-max-length=7\nx-queue-mode=lazy")
    b.submit("#add-queue", "Queue ui-args declared.")
    q = api.get("/api/queues/%2F/ui-args")
    assert q["arguments"] == {"x-max-length": 7, "x-queue-mode": "lazy"}, q["arguments"]
    for i in range(12):
        api.call("PUT", f"/api/queues/%2F/ui-page-{i:02}", {"durable": False})
    b.fill("#main form[role=search]", "filter", "ui-page-")
    b.fill("#main form[role=search]", "page_size", "10")
    b.css("#main form[role=search] button[type=submit]").click()
    b.until("page 1 of 2", lambda: "Page 1 of 2" in b.text(".pager"))
    b.driver.find_element(By.XPATH, "//button[normalize-space()='Next page']").click()
    b.until("page 2 with 2 queues", lambda: "Page 2 of 2" in b.text(".pager")
            and len(b.driver.find_elements(By.CSS_SELECTOR, "#queue-list tbody tr")) == 2)
    # Sorting by name, reversed, puts ui-page-11 first on page 1.
    b.driver.find_element(By.XPATH, "//button[normalize-space()='Previous page']").click()
    b.until("page 1", lambda: "Page 1 of 2" in b.text(".pager"))
    b.driver.find_element(By.XPATH, "//th/button[starts-with(normalize-space(), 'Name')]").click()
    b.until("reverse order", lambda: (b.driver.find_elements(By.CSS_SELECTOR, "#queue-list tbody tr td:nth-child(2)") or [None])[0].text == "ui-page-11")
    for i in range(12):
        api.call("DELETE", f"/api/queues/%2F/ui-page-{i:02}")
    assert b.js_errors() == []


def test_connection_force_close(ctx):
    b = ctx.browser
    params = pika.ConnectionParameters("127.0.0.1", ctx.broker.amqp,
                                       client_properties={"connection_name": "ui-test-conn"})
    conn = pika.BlockingConnection(params)
    conn.channel()
    try:
        b.go("#/connections", "Connections")
        b.until("the pika connection", lambda: "ui-test-conn" in b.text("#connection-list"))
        b.shot("06-connections")
        row = b.driver.find_element(By.XPATH, "//tr[td[normalize-space()='ui-test-conn']]")
        row.find_element(By.CSS_SELECTOR, "td a").click()
        b.until("the connection page", lambda: "pika" in b.text("#connection-details") + b.driver.page_source)
        b.until("its channel", lambda: "(1)" in b.text("main section:nth-of-type(3)"))
        b.shot("07-connection")
        b.fill("#close-form", "reason", "closed by the UI test")
        b.submit("#close-form", "closed")
        code = None
        deadline = time.time() + 10
        while time.time() < deadline and code is None:
            try:
                conn.process_data_events(time_limit=0.5)
            except pika.exceptions.ConnectionClosedByBroker as e:
                code = (e.reply_code, e.reply_text)
        assert code is not None, "the client was not closed"
        assert code[0] == 320, code
        assert "closed by the UI test" in code[1], code
    finally:
        if conn.is_open:
            conn.close()
    b.go("#/channels", "Channels")
    b.shot("08-channels")
    assert b.js_errors() == []


def test_admin_user_logs_in_over_amqp(ctx):
    b, api = ctx.browser, ctx.broker.api
    b.go("#/admin", "Admin")
    b.fill("#add-user", "username", "ui-user")
    b.fill("#add-user", "password", "ui-pass")
    b.fill("#add-user", "tags", "")
    b.submit("#add-user", "User ui-user saved.")
    b.until("ui-user listed", lambda: "ui-user" in b.text("#admin-list-users"))
    params = pika.ConnectionParameters("127.0.0.1", ctx.broker.amqp,
                                       credentials=pika.PlainCredentials("ui-user", "ui-pass"))
    try:
        pika.BlockingConnection(params).close()
        raise AssertionError("ui-user logged in before it had permissions")
    except pika.exceptions.AMQPConnectionError:
        pass
    b.fill("#set-permission", "user", "ui-user")
    b.submit("#set-permission", "Permission set for ui-user in /.")
    b.until("the permission listed", lambda: "ui-user" in b.text("#admin-list-perms"))
    conn = pika.BlockingConnection(params)
    conn.channel().queue_declare("ui-user-q", exclusive=True)
    conn.close()
    # Tags and password of an existing user: a new tag keeps the password.
    b.fill("#add-user", "username", "ui-user")
    b.fill("#add-user", "tags", "monitoring")
    b.submit("#add-user", "User ui-user saved.")
    assert api.get("/api/users/ui-user")["tags"] in (["monitoring"], "monitoring")
    pika.BlockingConnection(params).close()
    b.fill("#add-vhost", "name", "ui-vhost")
    b.submit("#add-vhost", "Virtual host ui-vhost added.")
    b.until("ui-vhost in the selector", lambda: "ui-vhost" in b.text("#vhost"))
    b.fill("#add-policy", "name", "ui-policy")
    b.fill("#add-policy", "pattern", "^ui-args$")
    b.fill("#add-policy", "definition", "max-length=5")
    b.submit("#add-policy", "Policy ui-policy saved.")
    b.fill("#set-limit", "value", "100")
    b.submit("#set-limit", "Limit max-connections of / set.")
    b.fill("#set-topic-permission", "user", "ui-user")
    b.fill("#set-topic-permission", "exchange", "amq.topic")
    b.submit("#set-topic-permission", "Topic permission set")
    b.until("every list", lambda: "ui-policy" in b.text("#admin-list-policies")
            and "max-connections" in b.text("#admin-list-limits") and "amq.topic" in b.text("#admin-list-topic"))
    b.shot("09-admin")
    assert b.js_errors() == []


def test_definitions_export_and_import(ctx):
    b, api = ctx.browser, ctx.broker.api
    api.call("PUT", "/api/queues/%2F/ui-defs-q", {"durable": True})
    b.go("#/", "Overview")
    for f in b.downloads.glob("*"):
        f.unlink()
    b.submit("#export-form", "Downloaded stablemq-definitions.json")
    path = b.downloads / "stablemq-definitions.json"
    b.until("the downloaded file", lambda: path.exists() and path.stat().st_size > 0)
    defs = json.loads(path.read_text())
    assert any(q["name"] == "ui-defs-q" for q in defs["queues"]), "the export lacks ui-defs-q"
    assert any(u["name"] == "ui-user" for u in defs["users"]), "the export lacks ui-user"
    assert api.call("DELETE", "/api/queues/%2F/ui-defs-q")[0] in (200, 204)
    b.css("#import-form input[type=file]").send_keys(str(path))
    b.submit("#import-form", "Definitions imported")
    assert api.call("GET", "/api/queues/%2F/ui-defs-q")[0] == 200, "import did not bring ui-defs-q back"
    b.shot("02-overview")
    assert b.js_errors() == []


def test_exchange_page(ctx):
    b, api = ctx.browser, ctx.broker.api
    b.go("#/exchanges", "Exchanges")
    b.fill("#add-exchange", "name", "ui-x")
    b.fill("#add-exchange", "type", "topic")
    b.submit("#add-exchange", "Exchange ui-x declared.")
    b.until("ui-x listed", lambda: "ui-x" in b.text("#exchange-list"))
    b.shot("10-exchanges")
    b.driver.find_element(By.LINK_TEXT, "ui-x").click()
    b.until("the exchange page", lambda: "ui-x" in b.text("main h1"))
    b.fill("#exchange-bind", "destination", "ui-defs-q")
    b.fill("#exchange-bind", "routing_key", "a.#")
    b.submit("#exchange-bind", "Bound ui-defs-q.")
    b.until("the binding listed", lambda: "a.#" in b.text("#exchange-bindings"))
    b.fill("#publish-form", "routing_key", "a.b")
    b.fill("#publish-form", "payload", "via ui-x")
    b.submit("#publish-form", "Message published.")
    assert api.get("/api/queues/%2F/ui-defs-q")["messages"] >= 1
    b.fill("#publish-form", "routing_key", "nowhere")
    b.submit("#publish-form", "not routed")
    b.shot("11-exchange")
    b.driver.find_element(By.CSS_SELECTOR, "#exchange-bindings button").click()
    b.until("the binding removed", lambda: "a.#" not in b.text("#exchange-bindings"))
    b.css("#delete-exchange button[type=submit]").click()
    b.accept_confirm()
    b.until("back on Exchanges", lambda: b.text("main h1") == "Exchanges")
    assert api.call("GET", "/api/exchanges/%2F/ui-x")[0] == 404
    assert b.js_errors() == []


PAGES = [("#/", "Overview"), ("#/connections", "Connections"), ("#/channels", "Channels"),
         ("#/exchanges", "Exchanges"), ("#/exchanges/%2F/amq.direct", "Exchange"),
         ("#/exchanges/%2F/amq.default", "Exchange"), ("#/queues", "Queues"),
         ("#/queues/%2F/ui-args", "Queue"), ("#/cluster", "Cluster"), ("#/admin", "Admin")]


def test_every_page_without_console_errors(ctx):
    b = ctx.browser
    for hash_, heading in PAGES:
        b.go(hash_, heading)
        time.sleep(0.5)
        assert b.status() == "", f"{hash_} shows an error: {b.status()}"
        errors = b.js_errors()
        assert errors == [], f"{hash_}: {errors}"
    b.go("#/cluster", "Cluster")
    b.until("the master named", lambda: b.text("#cluster-master") not in ("", "none"))
    b.shot("12-cluster-single")
    # Keyboard: Tab from the skip link reaches the navigation, Enter follows it.
    b.go("#/", "Overview")
    b.driver.set_window_size(420, 800)
    b.go("#/queues", "Queues")
    b.shot("13-queues-narrow")
    width = b.driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 440, f"the narrow page scrolls sideways: {width}px"
    b.driver.set_window_size(1280, 800)


def test_keyboard_navigation(ctx):
    b = ctx.browser
    b.go("#/", "Overview")
    link = b.driver.find_element(By.LINK_TEXT, "Queues")
    b.driver.execute_script("arguments[0].focus()", link)
    link.send_keys("\n")
    b.until("Queues by keyboard", lambda: b.text("main h1") == "Queues")
    assert b.css("#nav a[aria-current=page]").text == "Queues"


def test_errors_in_words(ctx):
    b = ctx.browser
    b.go("#/queues/%2F/no-such-queue", "Queue")
    b.until("a 404 in words", lambda: "Not found" in b.status())
    b.js_errors(allow_network=True)
    b.go("#/nowhere", "Not found")
    # A management-only user is told the Cluster page needs more.
    ctx.broker.api.call("PUT", "/api/users/ui-mgmt", {"password": "pw", "tags": "management"})
    ctx.broker.api.call("PUT", "/api/permissions/%2F/ui-mgmt", {"configure": ".*", "write": ".*", "read": ".*"})
    b.css("#logout").click()
    b.until("the login form", lambda: b.driver.find_elements(By.ID, "login-form"))
    login(b, "ui-mgmt", "pw")
    b.until("nodes need monitoring", lambda: "monitoring" in b.text("#nodes"))
    b.go("#/cluster", "Cluster")
    b.until("the refusal in words", lambda: "Not authorised" in b.status())
    b.shot("14-refused")
    errors = b.js_errors(allow_network=True)
    assert not errors, errors
    b.css("#logout").click()
    b.until("the login form", lambda: b.driver.find_elements(By.ID, "login-form"))
    login(b)


def test_lost_connection_in_words(ctx):
    b = ctx.browser
    b.go("#/queues", "Queues")
    ctx.broker.stop()
    Select(b.css("#refresh")).select_by_value("5000")
    b.until("lost connection in words", lambda: "Lost connection" in b.status(), timeout=20)
    b.shot("15-lost-connection")
    errors = b.js_errors(allow_network=True)
    assert not errors, errors


def test_cluster_page_names_the_master_after_kill9(ctx):
    tmp = Path(tempfile.mkdtemp(prefix="ui-cluster-"))
    cluster = Cluster(tmp)
    try:
        first = cluster.master(1)
        master_id = first["id"]
        other = next(i for i in (1, 2, 3) if i != master_id)
        b = ctx.browser
        b.base = f"http://127.0.0.1:{cluster.http[other]}"
        login(b)
        b.go("#/cluster", "Cluster")
        b.until("the master named", lambda: b.text("#cluster-master") == first["name"])
        b.until("three nodes replicating", lambda: b.text("#cluster-nodes").count("yes") >= 6)
        b.shot("03-cluster")
        cluster.kill9(master_id)
        b.until("a new master named", lambda: b.text("#cluster-master") not in ("", "none", first["name"]),
                timeout=45)
        new = b.text("#cluster-master")
        assert new == cluster.master(other)["name"], (new, cluster.master(other)["name"])
        b.shot("16-cluster-after-kill9")
        # One store of three left: the page says a quorum is missing.
        third = ({1, 2, 3} - {master_id, other}).pop()
        cluster.kill9(third)
        b.until("the missing-quorum banner", lambda: "quorum of stores is missing" in b.text("#cluster-banner"),
                timeout=30)
        b.shot("17-cluster-no-quorum")
        errors = b.js_errors(allow_network=True)
        assert not errors, errors
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


TESTS = [test_serves_page_and_assets, test_login_refusals, test_login_and_overview,
         test_queue_from_amqp_publish_get_purge_delete, test_add_queue_with_arguments_and_paging,
         test_connection_force_close, test_admin_user_logs_in_over_amqp, test_definitions_export_and_import,
         test_exchange_page, test_every_page_without_console_errors, test_keyboard_navigation,
         test_errors_in_words, test_lost_connection_in_words, test_cluster_page_names_the_master_after_kill9]


class Ctx:
    pass


def main():
    only = sys.argv[1:]
    for old in SHOTS.glob("FAILED-*.png"):
        old.unlink()
    tmp = Path(tempfile.mkdtemp(prefix="stablemq-ui-"))
    ctx = Ctx()
    ctx.broker = Broker(tmp)
    ctx.browser = None
    passed, failed = 0, []
    try:
        ctx.browser = Browser(tmp)
        ctx.browser.base = f"http://127.0.0.1:{ctx.broker.http}"
        for t in TESTS:
            if only and not any(o in t.__name__ for o in only):
                continue
            t0 = time.time()
            try:
                t(ctx)
                passed += 1
                print(f"ok   {t.__name__} ({time.time() - t0:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                failed.append(t.__name__)
                print(f"FAIL {t.__name__}: {e}", flush=True)
                traceback.print_exc()
                try:
                    ctx.browser.shot("FAILED-" + t.__name__)
                    ctx.browser.logs()
                except WebDriverException:
                    pass
    finally:
        if ctx.browser:
            ctx.browser.quit()
        ctx.broker.stop()
        if failed:
            print(f"broker log: {tmp / 'broker.log'}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"screenshots in {SHOTS}")
    if failed:
        print("failed: " + ", ".join(failed))
    print(f"ui: {passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
