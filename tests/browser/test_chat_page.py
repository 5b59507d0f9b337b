"""The built-in chat page in a real browser against `tern serve` with the
tiny model (which answers random tokens): an answer streams in and finishes
with a status line whose numbers are the response's usage; stop cancels the
request on the server; context-length, API-key, busy-server (503, then a
successful retry) and lost-connection errors are shown; the
conversation survives a reload; edit, regenerate, copy, new and delete work;
model output is rendered as sanitised markdown; the layout works at phone
width."""

import json
import threading

from selenium.webdriver.common.keys import Keys

from .browser_support import TernServer, metric, stop_cleanly, wait_until

LONG_ANSWER_TOKENS = 4000


def open_page(b, server):
    b.open(server.url + "/")
    b.wait(lambda: b.find("#model-name").text == "ernie-tiny", message="the model name never appeared")


def set_max_tokens(b, value):
    if not b.find("#settings").is_displayed():
        b.find("#settings-toggle").click()
    box = b.find("#max-tokens")
    box.clear()
    box.send_keys(str(value))
    box.send_keys(Keys.TAB)  # fires change: the setting is saved


def send(b, text):
    box = b.find("#prompt")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def answers(b):
    return b.find_all("#messages .message.assistant")


def wait_answer_finished(b, count, timeout=30.0):
    """Waits for answer number `count` (1-based) to end with a status line, an error or a stop."""
    def finished():
        found = answers(b)
        if len(found) < count or not b.find("#send").is_displayed():
            return None
        last = found[count - 1]
        done = last.find_elements("css selector", ".status, .error, .note.stopped")
        return last if done else None
    return b.wait(finished, timeout, f"answer {count} never finished")


def status_numbers(answer):
    fields = {}
    for span in answer.find_elements("css selector", ".status .value"):
        fields[span.get_attribute("data-field")] = span.text
    return fields


def chat_usage_from_network(b):
    """The `usage` and `tern` objects of the last /v1/chat/completions stream the page received,
    read from the browser's own network record (Chrome DevTools protocol)."""
    request_ids = []
    for entry in b.driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.responseReceived" and \
                message["params"]["response"]["url"].endswith("/v1/chat/completions"):
            request_ids.append(message["params"]["requestId"])
    assert request_ids, "the page made no /v1/chat/completions request"
    body = b.driver.execute_cdp_cmd("Network.getResponseBody", {"requestId": request_ids[-1]})["body"]
    usage = timings = None
    for line in body.splitlines():
        if line.startswith("data: {"):
            chunk = json.loads(line[len("data: "):])
            usage = chunk.get("usage") or usage
            timings = chunk.get("tern") or timings
    return usage, timings


def ignore_eos_in_chat_requests(b):
    """The page's chat requests get ignore_eos, so an answer runs to max_tokens (the tiny model may pick
    its end token at any point)."""
    b.js("""const send = window.fetch;
            window.fetch = (url, options) => {
              if (String(url).endsWith('/v1/chat/completions')) {
                options = Object.assign({}, options, {body: JSON.stringify(
                    Object.assign(JSON.parse(options.body), {ignore_eos: true}))});
              }
              return send(url, options);
            };""")


def test_answer_streams_in_with_status_line_and_survives_reload(browser, dedicated_page_server):
    # The reference kernels and no end token: 600 tokens of the tiny model take most of a second, so the
    # answer arrives in several pieces (the optimized kernels can write it before the page redraws twice).
    page_server = dedicated_page_server("--cpu-kernels", "reference")
    b = browser()
    open_page(b, page_server)
    assert b.find("#context-length").text == "4,096 tokens"
    assert b.find("#temperature").get_attribute("placeholder") == "0.8"  # the model's generation_config
    set_max_tokens(b, 600)
    ignore_eos_in_chat_requests(b)
    # Count the distinct partial texts the answer shows before it is complete.
    b.js("""window.partials = new Set();
            new MutationObserver(() => {
              const c = document.querySelector('#messages .assistant .content.streaming');
              if (c && c.textContent) window.partials.add(c.textContent.length);
            }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});""")
    question = "你好！请用中文介绍一下你自己 🌟"
    send(b, question)
    answer = wait_answer_finished(b, 1)
    assert b.find("#messages .message.user .content").text == question
    assert answer.find_element("css selector", ".content").text.strip(), "the answer is empty"
    assert len(b.js("return [...window.partials]")) >= 2, "the answer did not stream in"
    shown = status_numbers(answer)
    usage, timings = chat_usage_from_network(b)
    assert int(shown["prompt-tokens"]) == usage["prompt_tokens"]
    assert int(shown["completion-tokens"]) == usage["completion_tokens"]
    assert 1 <= usage["completion_tokens"] <= 600
    assert float(shown["tokens-per-second"]) == round(timings["tokens_per_second"], 1)
    assert shown["ttft"].endswith("ms") or shown["ttft"].endswith(" s")
    b.screenshot("answered")

    b.driver.refresh()
    b.wait(lambda: len(answers(b)) == 1, message="the conversation was not restored after a reload")
    assert b.find("#messages .message.user .content").text == question
    assert status_numbers(answers(b)[0]) == shown
    title = b.find("#conversation-list .conversation.current").text
    assert title.startswith("你好！请用中文介绍一下你自己"), title
    assert b.find("#max-tokens").get_attribute("value") == "600"


def test_stop_cancels_the_request_on_the_server(browser, dedicated_page_server):
    # The reference kernels: the answer must still be generating across a few of the live panel's 1.5 s
    # polls, and the optimized kernels write the tiny model's 4,000 tokens in under half a second.
    page_server = dedicated_page_server("--cpu-kernels", "reference")
    b = browser()
    open_page(b, page_server)
    set_max_tokens(b, LONG_ANSWER_TOKENS)
    # The live panel's highest count of running requests, as the page shows it.
    b.js("""window.maxRunning = 0;
            new MutationObserver(() => {
              window.maxRunning = Math.max(window.maxRunning, +document.getElementById('live-running').textContent);
            }).observe(document.getElementById('live'), {subtree: true, childList: true, characterData: true});""")
    # The tiny model may pick its end token at any point; this answer must run long enough to be stopped.
    ignore_eos_in_chat_requests(b)
    send(b, "Write a very long story.")
    # Read in the page: the answer's element is replaced at every redraw while it streams in.
    b.wait(lambda: b.js("""const c = document.querySelector('#messages .assistant .content.streaming');
                           return !document.getElementById('stop').hidden && !!c && c.textContent.trim() !== '';"""),
           message="the answer never started")
    assert wait_until(lambda: metric(page_server, "vllm:num_requests_running") == 1, timeout=5)
    b.wait(lambda: b.js("return window.maxRunning") == 1, timeout=5, message="the live panel never showed 1 running")
    b.find("#stop").click()
    answer = wait_answer_finished(b, 1)
    assert answer.find_elements("css selector", ".note.stopped"), "no 'Stopped.' note"
    assert wait_until(lambda: metric(page_server, "vllm:num_requests_running") == 0, timeout=5), \
        "the server still runs the stopped request"
    assert answer.find_element("css selector", ".content").text.strip(), "the partial answer was dropped"
    assert b.find("#send").is_displayed() and not b.find("#stop").is_displayed()
    b.wait(lambda: b.find("#live-running").text == "0", timeout=5, message="the live panel never showed 0 running")


def test_edit_regenerate_copy_new_and_delete(browser, page_server):
    b = browser()
    open_page(b, page_server)
    set_max_tokens(b, 16)
    send(b, "first question")
    wait_answer_finished(b, 1)

    b.find("#messages .message.assistant .actions .regenerate").click()
    answer = wait_answer_finished(b, 1)
    assert len(b.find_all("#messages .message")) == 2 and answer.find_elements("css selector", ".status")

    b.find("#messages .message.assistant .actions .copy").click()
    b.wait(lambda: b.find("#messages .message.assistant .actions .copy").text == "Copied")

    b.find("#messages .message.user .actions .edit").click()
    area = b.find("#messages .message.user .edit-area")
    area.clear()
    area.send_keys("edited question")
    b.find("#messages .message.user .actions .primary").click()
    wait_answer_finished(b, 1)
    users = b.find_all("#messages .message.user .content")
    assert [u.text for u in users] == ["edited question"]

    b.find("#new-chat").click()
    assert len(b.find_all("#conversation-list .conversation")) == 2
    assert not b.find_all("#messages .message")
    send(b, "second conversation")
    wait_answer_finished(b, 1)
    b.find("#conversation-list .conversation.current .conversation-delete").click()
    titles = [t.text for t in b.find_all("#conversation-list .conversation-title")]
    assert titles == ["first question"], titles  # a conversation keeps the title of its first question
    assert [u.text for u in b.find_all("#messages .message.user .content")] == ["edited question"]


def test_markdown_is_rendered_sanitised_and_highlighted(browser, page_server):
    code = "\n".join(f"def function_{i}(x):\n    return x * {i}  # 注释 {i}" for i in range(150))
    answer = ("## 标题 😀\n\n中文段落，**加粗**和`code`。\n\n"
              f"```python\n{code}\n```\n\n"
              "<script>window.injected = 1</script><img src=\"/web/style.css\" onerror=\"window.injected = 2\">"
              "\n\n[a link](javascript:window.injected=3) and [another](/web/LICENSES.md)\n")
    conversation = {"id": "fixed", "title": "markdown", "system": "", "updated": 1,
                    "messages": [{"role": "user", "content": "show markdown"},
                                 {"role": "assistant", "content": answer}]}
    b = browser()
    b.open(page_server.url + "/")
    b.js("localStorage.setItem('tern.conversations', JSON.stringify([arguments[0]]));"
         "localStorage.setItem('tern.current', 'fixed');", conversation)
    b.driver.refresh()
    b.wait(lambda: b.find_all("#messages .message.assistant pre code"))
    content = b.find("#messages .message.assistant .content")
    assert content.find_element("css selector", "h2").text == "标题 😀"
    assert content.find_element("css selector", "strong").text == "加粗"
    highlighted = content.find_element("css selector", "pre code")
    assert "hljs" in highlighted.get_attribute("class")
    assert len(highlighted.find_elements("css selector", "span.hljs-keyword")) >= 150
    assert "return x * 149  # 注释 149" in highlighted.get_attribute("textContent")
    assert not content.find_elements("css selector", "script")
    assert b.js("return window.injected") is None
    links = {a.text: a.get_attribute("href") or "" for a in content.find_elements("css selector", "a")}
    assert links["another"].endswith("/web/LICENSES.md")
    assert "a link" not in links or not links["a link"].startswith("javascript:"), links
    # The long code block scrolls inside its box; the page itself does not widen.
    assert b.js("return document.documentElement.scrollWidth <= window.innerWidth")
    b.screenshot("markdown")


def test_context_too_long_is_shown_and_old_turns_are_trimmed(dedicated_page_server, browser):
    server = dedicated_page_server("--max-model-len", "96")
    b = browser()
    b.allow_console = ["status of 400 (Bad Request)"]  # the page's request that the server refuses
    open_page(b, server)
    send(b, "这是一个很长的问题。" * 40)
    answer = wait_answer_finished(b, 1)
    error = answer.find_element("css selector", ".error")
    assert error.get_attribute("data-kind") == "context"
    assert "too long for the model's context" in error.text and "maximum context length is 96" in error.text
    assert error.find_elements("css selector", "button.retry")
    b.screenshot("context-error")

    b.find("#new-chat").click()
    set_max_tokens(b, 8)
    for turn in range(1, 7):
        send(b, f"第{turn}个问题，请简短回答。")
        answer = wait_answer_finished(b, turn)
        assert not answer.find_elements("css selector", ".error"), answer.text
        if answer.find_elements("css selector", ".note.trimmed"):
            break
    else:
        raise AssertionError("no answer said that earlier messages were left out")
    assert "left out to fit the model's context" in answer.text
    assert answer.find_elements("css selector", ".status")


def test_api_key_is_asked_for_and_kept_for_the_session(dedicated_page_server, browser):
    server = dedicated_page_server("--api-key", "sesame")
    b = browser()
    b.allow_console = ["status of 401 (Unauthorized)"]  # the requests made before the right key is given
    b.open(server.url + "/")
    b.wait(lambda: b.visible("#key-dialog"), message="the page did not ask for the key")
    assert "needs an API key" in b.find("#key-message").text
    b.find("#api-key").send_keys("wrong")
    b.find("#key-submit").click()
    b.wait(lambda: b.visible("#key-dialog") and "refused" in b.find("#key-message").text,
           message="a wrong key was not reported")
    b.screenshot("key-refused")
    b.find("#api-key").clear()
    b.find("#api-key").send_keys("sesame")
    b.find("#key-submit").click()
    b.wait(lambda: b.find("#model-name").text == "ernie-tiny")
    set_max_tokens(b, 8)
    send(b, "hello")
    assert wait_answer_finished(b, 1).find_elements("css selector", ".status")
    b.driver.refresh()
    b.wait(lambda: b.find("#model-name").text == "ernie-tiny", message="the key was not kept across a reload")
    assert not b.visible("#key-dialog")


def test_phone_width_layout(browser, page_server):
    b = browser(width=390, height=844)
    open_page(b, page_server)
    assert b.js("return window.innerWidth") == 390
    assert b.find("#menu").is_displayed()
    assert b.js("return document.getElementById('sidebar').getBoundingClientRect().right <= 0")
    set_max_tokens(b, 24)
    b.find("#settings-toggle").click()
    box = b.find("#prompt")
    box.send_keys("手机上的问题 📱")
    box.send_keys(Keys.SHIFT, Keys.ENTER)  # a new line, not a send
    box.send_keys("第二行")
    assert not b.find_all("#messages .message")
    box.send_keys(Keys.ENTER)
    wait_answer_finished(b, 1)
    assert b.find("#messages .message.user .content").text == "手机上的问题 📱\n第二行"
    assert b.js("return document.documentElement.scrollWidth <= window.innerWidth")
    composer = b.js("return document.getElementById('composer').getBoundingClientRect().bottom")
    assert composer <= b.js("return window.innerHeight") + 1
    b.screenshot("phone")
    b.find("#menu").click()
    b.wait(lambda: b.js("return document.getElementById('sidebar').getBoundingClientRect().left >= 0"))
    assert b.find("#conversation-list .conversation.current").is_displayed()
    b.screenshot("phone-sidebar")


def test_page_assets_load_offline_without_errors(browser, page_server):
    b = browser()
    open_page(b, page_server)
    loaded = b.js("return [typeof marked.parse, typeof DOMPurify.sanitize, typeof hljs.highlight]")
    assert loaded == ["function", "function", "function"]
    urls = b.js("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls and all(u.startswith(page_server.url) for u in urls), urls


def test_lost_connection_is_shown_with_retry(browser):
    server = TernServer()
    b = browser()
    b.allow_console = ["net::ERR_CONNECTION_REFUSED"]  # the page's requests after the server is gone
    open_page(b, server)
    stop_cleanly(server)  # exit 0 on SIGTERM asserted
    b.wait(lambda: b.visible("#banner") and "connection to the server was lost" in b.find("#banner").text,
           timeout=10, message="no banner after the server went away")
    assert b.find("#live").get_attribute("class") == "offline"
    send(b, "are you there?")
    error = wait_answer_finished(b, 1).find_element("css selector", ".error")
    assert error.get_attribute("data-kind") == "network" and "connection" in error.text
    assert error.find_elements("css selector", "button.retry")


def test_busy_server_is_shown_and_retry_succeeds(dedicated_page_server, browser):
    server = dedicated_page_server("--max-queued-requests", "1")
    b = browser()
    b.allow_console = ["status of 503 (Service Unavailable)"]  # the page's request while the queue is full
    open_page(b, server)
    set_max_tokens(b, 8)
    # Another client's long request fills the one-request queue.
    other = threading.Thread(target=server.post_json, args=("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "long"}], "max_tokens": 2500, "ignore_eos": True}),
        kwargs={"timeout": 120})
    other.start()
    try:
        assert wait_until(lambda: metric(server, "vllm:num_requests_running") == 1, timeout=10)
        send(b, "我也想问一个问题")
        error = wait_answer_finished(b, 1).find_element("css selector", ".error")
        assert error.get_attribute("data-kind") == "busy" and "busy" in error.text
        assert "retrying in" in error.text  # the server's Retry-After
        b.screenshot("busy")
    finally:
        other.join()
    error.find_element("css selector", "button.retry").click()
    answer = wait_answer_finished(b, 1)
    assert answer.find_elements("css selector", ".status") and not answer.find_elements("css selector", ".error")


def test_dark_theme_follows_the_system(browser, page_server):
    b = browser()
    b.driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                             {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    open_page(b, page_server)
    background = b.js("return getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(22, 24, 28)", background
    assert b.js("return matchMedia(document.querySelector('link[href$=\"hljs-dark.css\"]').media).matches")
    b.screenshot("dark")


def test_demo_model_shows_its_notice_and_answers_a_title_with_a_poem(browser):
    from .browser_support import ROOT

    server = TernServer(model=ROOT / "models" / "ernie-demo")
    b = None
    try:
        b = browser()
        b.open(server.url + "/")
        b.wait(lambda: b.find("#model-name").text == "ernie-demo", message="the model name never appeared")
        notice = b.find("#model-notice")
        assert notice.is_displayed() and "tern serve baidu/ERNIE-4.5-0.3B-PT" in notice.text
        if not b.find("#settings").is_displayed():
            b.find("#settings-toggle").click()
        b.find("#temperature").send_keys("0")
        send(b, "《春晓》")
        answer = wait_answer_finished(b, 1)
        assert "春眠不觉晓" in answer.text, answer.text
        b.screenshot("demo-model")
    finally:
        if b is not None:
            b.open("about:blank")  # the page polls /metrics: leave it before its server stops
        stop_cleanly(server)
