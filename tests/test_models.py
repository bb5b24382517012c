import json
import os
import subprocess
import sys

import pytest

from grpo_core.models.loading import ModelResolutionError, load_model, resolve_model


def test_local_directory_resolves(tokenizer, tiny_model, tmp_path):
    tiny_model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    path, record = resolve_model(str(tmp_path / "m"))
    assert path == (tmp_path / "m").resolve() and record["kind"] == "local"
    model, tok = load_model(path)
    assert tok.padding_side == "left" and tok.pad_token == "<pad>"


def test_bad_names_fail_clearly(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelResolutionError, match="has no config.json"):
        resolve_model(str(tmp_path / "empty"))
    with pytest.raises(ModelResolutionError, match="not a hub id"):
        resolve_model(str(tmp_path / "missing"))


def _resolve_offline(name: str, cache) -> subprocess.CompletedProcess:
    code = (
        "import json; from grpo_core.models.loading import resolve_model; "
        f"p, r = resolve_model({name!r}); print(json.dumps([str(p), r]))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_hub_id_resolves_from_the_local_cache_offline(tokenizer, tiny_model, tmp_path):
    """A hub id goes through huggingface_hub (offline here): the cache layout it reads."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--acme--tiny"
    snapshot = repo / "snapshots" / commit
    tiny_model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    done = _resolve_offline("acme/tiny", tmp_path)
    assert done.returncode == 0, done.stderr
    path, record = json.loads(done.stdout.strip().splitlines()[-1])
    assert path == str(snapshot) and record == {
        "kind": "hub",
        "name": "acme/tiny",
        "revision": None,
        "commit": commit,
    }
    missing = _resolve_offline("acme/absent", tmp_path)
    assert missing.returncode != 0 and "cannot resolve on the hub" in missing.stderr
