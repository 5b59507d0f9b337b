"""Models from the Hugging Face hub: `tern download`, and `tern serve` /
`tern generate` with ORG/NAME, against the fake hub of fake_hub.py (the
real hub is not reachable from the tests). The cache must be laid out as
huggingface_hub lays it out: huggingface_hub, pointed at the same fake hub,
reads what tern fetched, and tern reads what huggingface_hub fetched."""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import DATA
from fake_hub import FakeHub, FakeRepo, git_blob_id

REPO = "org/ernie-tiny"
GGUF_REPO = "org/ernie-tiny-GGUF"
PRIVATE_REPO = "org/ernie-private"
MODEL_FILES = ["added_tokens.json", "config.json", "generation_config.json", "model.safetensors",
               "special_tokens_map.json", "tokenizer.model", "tokenizer_config.json"]
PROMPT = "Hello"


def tiny_files():
    files = {p.name: p.read_bytes() for p in sorted((DATA / "ernie-tiny").iterdir())}
    files["README.md"] = b"# ernie-tiny\n"
    return files


@pytest.fixture(scope="module")
def gguf_files(tern_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("gguf")
    files = {"README.md": b"# GGUF\n"}
    for outtype, tag in (("q8_0", "Q8_0"), ("bf16", "BF16")):
        path = out / f"ernie-tiny-{tag}.gguf"
        r = subprocess.run([tern_bin, "convert", "--model", DATA / "ernie-tiny", "--outfile", path, "--outtype",
                            outtype], capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        files[path.name] = path.read_bytes()
    return files


@pytest.fixture
def hub(gguf_files):
    with FakeHub() as h:
        h.add_repo(FakeRepo(REPO, tiny_files()))
        h.add_repo(FakeRepo(GGUF_REPO, gguf_files))
        h.add_repo(FakeRepo(PRIVATE_REPO, tiny_files(), private=True))
        h.renamed["old-org/ernie-tiny"] = REPO
        yield h


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "hf-cache"


def hub_env(hub, cache, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_"))}
    env.update({"HF_ENDPOINT": hub.url if hub else "http://127.0.0.1:9", "HF_HUB_CACHE": str(cache),
                "HF_HOME": str(cache.parent / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"})
    env.update(extra)
    return env


def tern(tern_bin, env, *args, timeout=120, cwd=None):
    r = subprocess.run([tern_bin, *map(str, args)], capture_output=True, timeout=timeout, env=env, cwd=cwd)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def download(tern_bin, hub, cache, *args, **env):
    rc, out, err = tern(tern_bin, hub_env(hub, cache, **env), "download", *args)
    assert rc == 0, err
    return pathlib.Path(out.strip()), err


def generate(tern_bin, env, model, *extra):
    rc, out, err = tern(tern_bin, env, "generate", model, "--prompt", PROMPT, "--max-tokens", 8, "--temperature", 0,
                        "--ignore-eos", "--json", *extra)
    assert rc == 0, err
    return json.loads(out)["token_ids"]


@pytest.fixture(scope="module")
def local_tokens(tern_bin):
    r = subprocess.run([tern_bin, "generate", str(DATA / "ernie-tiny"), "--prompt", PROMPT, "--max-tokens", "8",
                        "--temperature", "0", "--ignore-eos", "--json"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)["token_ids"]


def repo_dir(cache, repo_id=REPO):
    return cache / ("models--" + repo_id.replace("/", "--"))


def test_fresh_download_lays_out_the_hf_cache(tern_bin, hub, cache):
    repo = hub.repos[REPO]
    folder, _ = download(tern_bin, hub, cache, REPO)
    assert folder == repo_dir(cache) / "snapshots" / repo.commit
    assert (repo_dir(cache) / "refs" / "main").read_text() == repo.commit
    assert sorted(p.name for p in folder.iterdir()) == MODEL_FILES, "only the files the model needs"
    for name in MODEL_FILES:
        pointer = folder / name
        etag = repo.sha256(name) if repo.is_lfs(name) else git_blob_id(repo.files[name])
        assert os.readlink(pointer) == f"../../blobs/{etag}", name
        assert pointer.read_bytes() == repo.files[name], name
    assert not list((repo_dir(cache) / "blobs").glob("*.incomplete"))
    # Every file from resolve/, the two LFS files through its redirect to the CDN.
    assert len(hub.gets(r"/resolve/")) == len(MODEL_FILES)
    assert len(hub.gets(r"^/cdn/")) == 2


def test_a_second_download_fetches_nothing(tern_bin, hub, cache):
    download(tern_bin, hub, cache, REPO)
    hub.clear()
    download(tern_bin, hub, cache, REPO)
    assert hub.gets() == [f"/api/models/{REPO}/revision/main"]


def test_serve_and_generate_take_the_repo_name(tern_bin, hub, cache, local_tokens):
    env = hub_env(hub, cache)
    assert generate(tern_bin, env, REPO) == local_tokens
    assert generate(tern_bin, env, f"--model={REPO}@main") == local_tokens
    proc = subprocess.Popen([tern_bin, "serve", REPO, "--host", "127.0.0.1", "--port", "0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "listening on" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "tern serve exited"
        port = re.search(r"listening on http://[0-9.]+:(\d+)", line).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            models = json.load(r)
        assert [m["id"] for m in models["data"]] == [REPO], "served under the repo's name, as vLLM does"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_a_local_folder_wins_over_a_repo_of_the_same_name(tern_bin, cache, tmp_path, local_tokens):
    shutil.copytree(DATA / "ernie-tiny", tmp_path / REPO)
    rc, out, err = tern(tern_bin, hub_env(None, cache), "generate", REPO, "--prompt", PROMPT, "--max-tokens", 8,
                        "--temperature", 0, "--ignore-eos", "--json", cwd=tmp_path)
    assert rc == 0, err
    assert json.loads(out)["token_ids"] == local_tokens
    assert not cache.exists()


def test_a_cut_connection_is_resumed(tern_bin, hub, cache):
    hub.cut_after["model.safetensors"] = 100_000
    folder, err = download(tern_bin, hub, cache, REPO)
    assert (folder / "model.safetensors").read_bytes() == hub.repos[REPO].files["model.safetensors"]
    ranges = [h.get("Range") for m, p, h in hub.requests if m == "GET" and p.startswith("/cdn/")
              and h.get("Range")]
    assert ranges == ["bytes=100000-"], "resumed where the connection was cut"
    assert "resuming" in err


def test_an_interrupted_run_is_resumed_from_the_incomplete_file(tern_bin, hub, cache):
    repo = hub.repos[REPO]
    data = repo.files["model.safetensors"]
    blobs = repo_dir(cache) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / (repo.sha256("model.safetensors") + ".incomplete")).write_bytes(data[:300_000])
    folder, _ = download(tern_bin, hub, cache, REPO)
    assert (folder / "model.safetensors").read_bytes() == data
    assert [h.get("Range") for m, p, h in hub.requests if p == "/cdn/" + repo.sha256("model.safetensors")] == \
        ["bytes=300000-"]


def test_a_corrupted_download_is_detected_and_fetched_again(tern_bin, hub, cache):
    hub.corrupt_once.add("model.safetensors")
    folder, err = download(tern_bin, hub, cache, REPO)
    assert (folder / "model.safetensors").read_bytes() == hub.repos[REPO].files["model.safetensors"]
    assert "sha256" in err and "model.safetensors" in err
    assert len(hub.gets(r"^/cdn/" + hub.repos[REPO].sha256("model.safetensors"))) == 2


def test_a_corrupted_cached_blob_is_detected_and_fetched_again(tern_bin, hub, cache, local_tokens):
    repo = hub.repos[REPO]
    folder, _ = download(tern_bin, hub, cache, REPO)
    blob = repo_dir(cache) / "blobs" / repo.sha256("model.safetensors")
    data = bytearray(blob.read_bytes())
    data[1000:1008] = b"\xff" * 8  # same size: only the sha256 tells
    blob.write_bytes(bytes(data))
    _, err = download(tern_bin, hub, cache, REPO)
    assert "corrupted" in err
    assert blob.read_bytes() == repo.files["model.safetensors"]
    # A truncated blob is caught by its size on every start, here by generate.
    blob.write_bytes(repo.files["model.safetensors"][:1000])
    assert generate(tern_bin, hub_env(hub, cache), REPO) == local_tokens
    assert blob.read_bytes() == repo.files["model.safetensors"]


def test_401_names_the_repo_and_hf_token(tern_bin, hub, cache):
    rc, _, err = tern(tern_bin, hub_env(hub, cache), "download", PRIVATE_REPO)
    assert rc == 1
    assert "401" in err and PRIVATE_REPO in err and "HF_TOKEN is not set" in err
    rc, _, err = tern(tern_bin, hub_env(hub, cache, HF_TOKEN="hf_wrong"), "download", PRIVATE_REPO)
    assert rc == 1
    assert "401" in err and "token from HF_TOKEN was not accepted" in err
    folder, _ = download(tern_bin, hub, cache, PRIVATE_REPO, HF_TOKEN=hub.token)
    assert (folder / "config.json").exists()
    # The token goes to the hub, not to the CDN on another host.
    cdn = [h for m, p, h in hub.requests if p.startswith("/cdn/")]
    assert cdn and not any("Authorization" in h for h in cdn)


def test_404s_name_the_repo_revision_and_file(tern_bin, hub, cache):
    env = hub_env(hub, cache, HF_TOKEN=hub.token)
    rc, _, err = tern(tern_bin, env, "download", "org/no-such-model")
    assert rc == 1 and "repo org/no-such-model not found" in err and "404" in err
    rc, _, err = tern(tern_bin, env, "download", f"{REPO}@no-such-branch")
    assert rc == 1 and f"revision 'no-such-branch' not found in repo {REPO}" in err
    hub.hidden.add("tokenizer.model")
    rc, _, err = tern(tern_bin, env, "download", REPO)
    assert rc == 1 and f"file tokenizer.model not found in repo {REPO}" in err
    rc, _, err = tern(tern_bin, env, "generate", "org/no-such-model", "--prompt", "x")
    assert rc == 1 and "not found" in err and "no local file or folder 'org/no-such-model'" in err


def test_offline_mode_is_served_from_the_cache(tern_bin, hub, cache, local_tokens):
    download(tern_bin, hub, cache, REPO)
    hub.clear()
    env = hub_env(hub, cache, HF_HUB_OFFLINE="1")
    assert generate(tern_bin, env, REPO) == local_tokens
    assert hub.requests == []


def test_offline_mode_without_the_model_says_both(tern_bin, hub, cache):
    rc, _, err = tern(tern_bin, hub_env(hub, cache, HF_HUB_OFFLINE="1"), "generate", REPO, "--prompt", "x")
    assert rc == 1
    assert f"model {REPO} (revision main) is not in the cache" in err
    assert "offline mode is on (HF_HUB_OFFLINE=1)" in err
    assert hub.requests == []


def test_an_unreachable_hub_falls_back_to_the_cache(tern_bin, hub, cache, local_tokens):
    download(tern_bin, hub, cache, REPO)
    assert generate(tern_bin, hub_env(None, cache), REPO) == local_tokens


def test_gguf_file_by_quantization_tag(tern_bin, hub, cache, gguf_files):
    path, _ = download(tern_bin, hub, cache, f"{GGUF_REPO}:Q8_0")
    assert path.name == "ernie-tiny-Q8_0.gguf"
    assert sorted(p.name for p in path.parent.iterdir()) == ["ernie-tiny-Q8_0.gguf"], "that file alone"
    assert path.read_bytes() == gguf_files["ernie-tiny-Q8_0.gguf"]
    env = hub_env(hub, cache)
    assert len(generate(tern_bin, env, f"{GGUF_REPO}:ernie-tiny-Q8_0.gguf")) == 8
    rc, _, err = tern(tern_bin, env, "download", GGUF_REPO)
    assert rc == 1 and "ernie-tiny-BF16.gguf" in err and f"{GGUF_REPO}:FILE.gguf" in err


def test_include_patterns_and_renamed_repos(tern_bin, hub, cache):
    folder, _ = download(tern_bin, hub, cache, "old-org/ernie-tiny", "--include", "*.json", "--include", "README.md")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["README.md", "golden.json"] + [f for f in MODEL_FILES if f.endswith(".json")])


def test_bad_server_answers_are_clear_errors(tern_bin, hub, cache):
    hub.broken_file_list = True
    rc, _, err = tern(tern_bin, hub_env(hub, cache), "download", REPO)
    assert rc == 1 and f"file list for {REPO} is not a JSON object" in err
    hub.broken_file_list = False
    hub.announced_size_delta["model.safetensors"] = -10
    rc, _, err = tern(tern_bin, hub_env(hub, cache), "download", REPO)
    assert rc == 1 and "model.safetensors" in err and "the hub announced" in err


def huggingface_hub(hub, cache, code):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=hub_env(hub, cache, HF_HUB_DISABLE_PROGRESS_BARS="1"))
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_huggingface_hub_reads_what_tern_downloaded(tern_bin, hub, cache):
    folder, _ = download(tern_bin, hub, cache, REPO)
    hub.clear()
    got = huggingface_hub(hub, cache, f"from huggingface_hub import snapshot_download\n"
                                      f"print(snapshot_download({REPO!r}, allow_patterns={MODEL_FILES!r}))")
    assert pathlib.Path(got) == folder
    assert not hub.gets(r"/resolve/|^/cdn/"), "huggingface_hub found every file in tern's cache"


def test_tern_reads_what_huggingface_hub_downloaded(tern_bin, hub, cache, local_tokens):
    huggingface_hub(hub, cache, f"from huggingface_hub import snapshot_download\n"
                                f"print(snapshot_download({REPO!r}))")
    hub.clear()
    assert generate(tern_bin, hub_env(hub, cache), REPO) == local_tokens
    assert not hub.gets(r"/resolve/|^/cdn/"), "tern found every file in huggingface_hub's cache"
    assert generate(tern_bin, hub_env(hub, cache, HF_HUB_OFFLINE="1"), REPO) == local_tokens
