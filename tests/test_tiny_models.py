"""The tiny local models: tokenizer round-trip, reproducible bytes, HF reload, cache keying."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from sglang_eagle3.checkpoint import hf_target  # noqa: E402
from sglang_eagle3.testing.tiny import cache, checkpoint, target  # noqa: E402
from sglang_eagle3.testing.tiny import tokenizer as tok_mod  # noqa: E402
from sglang_eagle3.testing.tiny.config import TargetRecipe  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return target.build_tiny_target(tmp_path_factory.mktemp("tiny") / "a", train_steps=0)


def test_tokenizer_round_trips_text(built):
    tk = tok_mod.load_tokenizer(built)
    assert len(tk) == 1024
    assert (tk.bos_token_id, tk.eos_token_id, tk.pad_token_id) == (0, 1, 2)
    samples = [
        "def f(x):\n    return x ** 2  # square\n",
        "\tclass A:\n\t\tpass\r\n",
        "unicode: héllo wörld ✓ 日本語 🙂",
        "",
        "  leading and trailing spaces  ",
    ]
    for text in samples:
        ids = tk(text)["input_ids"]
        assert ids[0] == tk.bos_token_id  # bos prepended, like DeepSeek-V3's tokenizer
        assert tk.decode(ids, skip_special_tokens=True) == text
        assert all(0 <= i < 1024 for i in ids)
    # BPE merges actually compress Python source.
    code = "import os\nfor name in sorted(os.listdir(path)):\n    print(name)\n"
    assert len(tk(code, add_special_tokens=False)["input_ids"]) < len(code) / 2


def test_tokenizer_training_is_deterministic():
    a = tok_mod.train_tokenizer().to_str()
    b = tok_mod.train_tokenizer().to_str()
    assert a == b


def test_same_seed_builds_byte_identical_files(built, tmp_path):
    again = target.build_tiny_target(tmp_path / "b", train_steps=0)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tiny_recipe.json"):
        assert (built / name).read_bytes() == (again / name).read_bytes(), name


def test_other_seed_gives_other_weights(built, tmp_path):
    other = target.build_tiny_target(tmp_path / "s1", seed=1, train_steps=0)
    assert (built / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()


def test_checkpoint_uses_sglang_per_expert_names(built):
    names = set(safetensors_torch.load_file(str(built / "model.safetensors")))
    assert not any(n.endswith((".experts.gate_up_proj", ".experts.down_proj")) for n in names)
    for e in range(8):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            assert f"model.layers.1.mlp.experts.{e}.{proj}.weight" in names
    assert "model.layers.1.mlp.gate.e_score_correction_bias" in names
    assert "model.layers.1.mlp.shared_experts.gate_proj.weight" in names
    assert "model.layers.0.mlp.gate_proj.weight" in names  # first_k_dense_replace = 1
    assert "lm_head.weight" in names  # untied


def test_reload_gives_identical_logits(built):
    model, _, _ = target.make_tiny_target(TargetRecipe.make(train_steps=0))
    reloaded = hf_target.load_hf_target(built)
    ids = torch.randint(3, 1024, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        got = reloaded(input_ids=ids).logits
    assert torch.equal(want, got)
    bias = reloaded.model.layers[1].mlp.gate.e_score_correction_bias
    assert bias.abs().sum() > 0  # the seeded router bias survived the round trip


def test_per_expert_conversion_round_trips():
    model = target.init_model(TargetRecipe.make(train_steps=0))
    state = model.state_dict()
    back = hf_target.to_fused(checkpoint.to_per_expert(state))
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) for k in state)


def test_config_has_distinct_default_taps(built):
    cfg = json.loads((built / "config.json").read_text())
    n = cfg["num_hidden_layers"]
    assert n >= 8
    taps = [2, n // 2, n - 3]  # SGLang 0.5.23's default EAGLE-3 capture layers
    assert len(set(taps)) == 3 and all(0 <= t < n for t in taps)
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"]
    assert cfg["model_type"] == "deepseek_v3"
    assert cfg["tie_word_embeddings"] is False
    assert cfg["rope_parameters"]["rope_type"] == "yarn"
    assert cfg["rope_scaling"]["type"] == "yarn"
    assert cfg["topk_method"] == "noaux_tc" and cfg["n_routed_experts"] == 8
    recipe = json.loads((built / "tiny_recipe.json").read_text())
    assert recipe["default_taps"] == taps


def test_recipe_rejects_shallow_models():
    with pytest.raises(ValueError, match="num_layers"):
        TargetRecipe.make(num_layers=6)


def test_recipe_change_gives_new_cache_dir(tmp_path):
    first = cache.tiny_target_dir(train_steps=0, root=tmp_path)
    assert first.parent == tmp_path and cache.is_complete(first)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert cache.tiny_target_dir(train_steps=0, root=tmp_path) == first  # reused, not rebuilt
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    other = cache.tiny_target_dir(train_steps=0, seed=1, root=tmp_path)
    assert other != first and cache.is_complete(other)
    base = TargetRecipe.make(train_steps=0)
    assert cache.recipe_key(base) != cache.recipe_key(TargetRecipe.make(train_steps=5))
    assert not list(tmp_path.glob(".*.tmp-*"))  # no temp dirs left behind


def test_cache_root_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    assert cache.cache_root() == tmp_path / "tiny"
    monkeypatch.delenv(cache.ENV_VAR)
    assert cache.cache_root() == Path.home() / ".cache" / "sglang_eagle3" / "tiny"


def test_concurrent_callers_build_once(tmp_path, monkeypatch):
    calls: list[Path] = []
    real = target.build_tiny_target

    def counting(out_dir, **kw):
        calls.append(Path(out_dir))
        return real(out_dir, **kw)

    monkeypatch.setattr(target, "build_tiny_target", counting)
    results: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(cache.tiny_target_dir(train_steps=0, root=tmp_path))
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1]
    assert len(calls) == 1


def test_source_fingerprint_ignores_comments_and_docstrings(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text('"""Doc."""\n\ndef f(x):\n    return x + 1\n')
    b.write_text('"""Other doc."""\n\n\ndef f(x):  # why\n    """Doc."""\n    return (x + 1)\n')
    c.write_text('"""Doc."""\n\ndef f(x):\n    return x + 2\n')
    assert cache.source_fingerprint(a) == cache.source_fingerprint(b)
    assert cache.source_fingerprint(a) != cache.source_fingerprint(c)
