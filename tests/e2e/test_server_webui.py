"""The chat page's HTTP side: every file the page loads is embedded in the
binary and served with its content type, an ETag and 304 on revalidation;
the page and its files stay open when an API key is set; --no-webui turns
them off (TGI's POST / still works); --web-root serves the page's own files
from disk; /v1/models tells the page the model's sampling defaults."""

import json
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytest_plugins = ["server_fixture"]

PAGE_FILES = {
    "/": "text/html; charset=utf-8",
    "/web/style.css": "text/css; charset=utf-8",
    "/web/app.js": "text/javascript; charset=utf-8",
    "/web/api.js": "text/javascript; charset=utf-8",
    "/web/conversations.js": "text/javascript; charset=utf-8",
    "/web/markdown.js": "text/javascript; charset=utf-8",
    "/web/LICENSES.md": "text/markdown; charset=utf-8",
    "/web/lib/marked.min.js": "text/javascript; charset=utf-8",
    "/web/lib/purify.min.js": "text/javascript; charset=utf-8",
    "/web/lib/highlight.min.js": "text/javascript; charset=utf-8",
    "/web/lib/hljs-light.css": "text/css; charset=utf-8",
    "/web/lib/hljs-dark.css": "text/css; charset=utf-8",
}
DEBIAN_FILES = {
    "/web/lib/marked.min.js": "/usr/share/javascript/marked/marked.min.js",
    "/web/lib/purify.min.js": "/usr/share/nodejs/dompurify/dist/purify.min.js",
    "/web/lib/highlight.min.js": "/usr/share/javascript/highlight.js/highlight.min.js",
}


def test_every_page_file_is_served_with_type_etag_and_304(server):
    for path, content_type in PAGE_FILES.items():
        status, headers, body = server.get(path)
        assert status == 200, path
        assert headers["content-type"] == content_type, path
        assert headers["cache-control"] == "no-cache" and re.fullmatch(r'"[0-9a-f]{20}"', headers["etag"]), path
        assert body, path
        status, again, body = server.get(path, headers={"If-None-Match": headers["etag"]})
        assert status == 304 and body == b"" and again["etag"] == headers["etag"], path
        status, _, _ = server.get(path, headers={"If-None-Match": '"someotherversion", W/"x"'})
        assert status == 200, path


def test_embedded_files_are_the_sources_byte_for_byte(server):
    for path, file in DEBIAN_FILES.items():
        assert server.get(path)[2] == open(file, "rb").read(), path
    for name in ("app.js", "style.css"):
        assert server.get("/web/" + name)[2] == (ROOT / "web" / name).read_bytes()
    assert server.get("/")[2] == (ROOT / "web" / "index.html").read_bytes()


def test_the_page_loads_only_embedded_files(server):
    html = server.get("/")[2].decode()
    loaded = set(re.findall(r'<script src="([^"]*)"', html)) | set(re.findall(r'<link [^>]*href="([^"]*)"', html))
    assert loaded - {"data:,"} <= set(PAGE_FILES), loaded - set(PAGE_FILES)
    assert len(loaded) >= 10
    assert "http://" not in html and "https://" not in html


def test_page_files_are_open_but_the_api_needs_the_key(dedicated_server):
    s = dedicated_server("--api-key", "sesame")
    for path in PAGE_FILES:
        assert s.get(path)[0] == 200, path
    assert s.get("/v1/models")[0] == 401
    assert s.get("/v1/models", headers={"Authorization": "Bearer sesame"})[0] == 200


def test_no_webui_turns_the_page_off(dedicated_server):
    s = dedicated_server("--no-webui")
    status, _, body = s.get("/")
    assert status == 404 and b"--no-webui" in body
    for path in PAGE_FILES:
        if path != "/":
            assert s.get(path)[0] == 404, path
    assert s.get("/v1/models")[0] == 200
    status, _, r = s.post_json("/", {"inputs": "x", "parameters": {"max_new_tokens": 2}})
    assert status == 200 and "generated_text" in r[0]


def test_no_webui_is_in_help(tern_bin):
    out = subprocess.run([tern_bin, "serve", "--help"], capture_output=True, text=True, timeout=30).stdout
    assert "--no-webui" in out and "--web-root" in out


def test_web_root_serves_the_pages_own_files_from_disk(dedicated_server, tmp_path):
    (tmp_path / "app.js").write_text("// edited on disk\n")
    s = dedicated_server("--web-root", tmp_path)
    status, headers, body = s.get("/web/app.js")
    assert status == 200 and body == b"// edited on disk\n" and headers["cache-control"] == "no-store"
    assert headers["content-type"] == "text/javascript; charset=utf-8"
    assert s.get("/web/style.css")[0] == 404  # not in the folder
    assert s.get("/web/lib/marked.min.js")[0] == 200  # libraries stay embedded


def test_models_lists_the_sampling_defaults(server, dedicated_server):
    model = json.loads(server.get("/v1/models")[2])["data"][0]
    assert model["generation_config"] == {"temperature": 0.8, "top_p": 0.8, "top_k": 0, "repetition_penalty": 1.0}
    s = dedicated_server("--generation-config", "vllm")
    neutral = json.loads(s.get("/v1/models")[2])["data"][0]["generation_config"]
    assert neutral == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0}
