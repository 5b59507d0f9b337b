"""The Chainlit app of examples/chainlit/ (PyPI chainlit, started by the
test) in a real browser in front of `tern serve` with the tiny model: a
question gets a streamed answer through the official openai client, with the
status line under it whose token counts are the server's (/tokenize for the
prompt, /metrics for the tokens generated)."""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from selenium.webdriver.common.keys import Keys

from .browser_support import ROOT, metric, wait_until

APP = ROOT / "examples" / "chainlit" / "app.py"
STATUS = re.compile(r"(\d+) tokens in · (\d+) out · ([\d.]+ m?s) to first token · ([\d.]+ m?s) total · "
                    r"([\d.]+) tokens/s")
# Chainlit's own page asks for web fonts, KaTeX's stylesheet and its logo from the internet,
# which these machines cannot reach; those failed loads are expected, nothing else is.
OFFLINE_LOADS = ["fonts.googleapis.com", "fonts.gstatic.com", "cdn.jsdelivr.net", "chainlit-cloud.s3",
                 "net::ERR_NAME_NOT_RESOLVED", "net::ERR_INTERNET_DISCONNECTED"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def chainlit_app(page_server, tmp_path):
    port = free_port()
    env = dict(os.environ, TERN_BASE_URL=page_server.url + "/v1", TERN_API_KEY="none", TERN_MAX_TOKENS="48")
    log = open(tmp_path / "chainlit.log", "wb")
    # In a scratch folder: chainlit writes its default .chainlit/config.toml and chainlit.md there.
    proc = subprocess.Popen([sys.executable, "-m", "chainlit", "run", str(APP), "--headless", "--host", "127.0.0.1",
                             "--port", str(port)], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("chainlit did not start:\n" + (tmp_path / "chainlit.log").read_text(errors="replace"))
        time.sleep(0.2)
    yield url, tmp_path / "chainlit.log"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_chainlit_app_streams_answers_with_the_status_line(page_server, chainlit_app, browser):
    b = browser()
    b.allow_console = OFFLINE_LOADS
    url, log = chainlit_app
    b.open(url)
    composer = b.wait(lambda: b.find_all("#chat-input") and b.find("#chat-input"), timeout=30,
                      message="chainlit's message box never appeared")
    # The chat session has started once the app has asked tern for its model (on_chat_start).
    assert wait_until(lambda: "/v1/models" in log.read_text(errors="replace"), timeout=30), log.read_text()
    generated_before = metric(page_server, "vllm:generation_tokens_total")
    question = "你好，tern！🌟"
    composer.send_keys(question)
    composer.send_keys(Keys.ENTER)
    status = b.wait(lambda: STATUS.search(b.find("body").text), timeout=60,
                    message="no status line under the answer")
    prompt_tokens, completion_tokens = int(status.group(1)), int(status.group(2))
    counted = page_server.post_json("/tokenize", {"messages": [{"role": "user", "content": question}],
                                                  "add_generation_prompt": True})[2]["count"]
    assert prompt_tokens == counted
    assert completion_tokens == metric(page_server, "vllm:generation_tokens_total") - generated_before
    assert question in b.find("body").text
    b.screenshot("answered")

    # A second turn carries the first one: its prompt holds the first question and answer too.
    composer = b.find("#chat-input")
    composer.send_keys("再说一遍")
    composer.send_keys(Keys.ENTER)
    b.wait(lambda: len(STATUS.findall(b.find("body").text)) >= 2, timeout=60, message="no second answer")
    second = [m for m in STATUS.finditer(b.find("body").text)][1]
    alone = page_server.post_json("/tokenize", {"messages": [{"role": "user", "content": "再说一遍"}],
                                                "add_generation_prompt": True})[2]["count"]
    assert int(second.group(1)) > max(alone, prompt_tokens)
