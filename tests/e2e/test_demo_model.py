"""The demo model `make run` serves (models/ernie-demo, tools/train_demo_model.py): it answers a
poem's title with the poem, greedy through `tern generate` and through `tern serve`, and the server
tells its users what the model is (the log line and /v1/models' `notice`)."""

import json

from conftest import ROOT, run_tern

pytest_plugins = ["server_fixture"]

DEMO = ROOT / "models" / "ernie-demo"


def test_demo_model_recites_a_poem_from_its_title(tern_bin):
    r = run_tern(tern_bin, "generate", "--model", DEMO, "--chat", "--prompt", "《春晓》", "--temperature", "0",
                 "--max-tokens", "64")
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    assert "孟浩然" in text and "春眠不觉晓" in text, text


def test_demo_model_introduces_itself():
    from server_fixture import TernServer, stop_cleanly  # the plugin's own module, loaded by pytest_plugins

    s = TernServer(model=DEMO)
    try:
        status, _, body = s.post_json("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "你好"}], "temperature": 0, "max_tokens": 200})
        assert status == 200, body
        answer = body["choices"][0]["message"]["content"]
        assert "演示模型" in answer and "baidu/ERNIE-4.5-0.3B-PT" in answer, answer

        status, _, body = s.post_json("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "《登鹳雀楼》"}], "temperature": 0, "max_tokens": 64})
        assert status == 200, body
        assert "白日依山尽" in body["choices"][0]["message"]["content"], body

        status, _, raw = s.get("/v1/models")
        notice = json.loads(raw)["data"][0]["notice"]
        assert "demo model" in notice and "tern serve baidu/ERNIE-4.5-0.3B-PT" in notice
        assert notice in s.logs()
    finally:
        stop_cleanly(s)


def test_models_without_a_notice_have_no_notice_field(server):
    status, _, raw = server.get("/v1/models")
    assert status == 200
    assert "notice" not in json.loads(raw)["data"][0]
