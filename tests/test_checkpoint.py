"""minillm.checkpoint: atomic saves, weights_only loads with clear errors, and the pretrained-folder format."""

import warnings
from pathlib import Path

import pytest
import torch

from minillm import checkpoint as ckpt
from minillm.alignment.reward_model import load_reward_model
from minillm.checkpoint import (
    CHECKSUM_FILE,
    MODEL_FILE,
    CheckpointError,
    UnverifiedCheckpointWarning,
    load_checkpoint,
    load_pretrained,
    save_checkpoint,
    save_pretrained,
    write_checksums,
)
from minillm.model import GPT, GPTConfig
from minillm.paths import data_path
from minillm.tokenizer import BPETokenizer


class _NotWeights:
    """An arbitrary class: unpickling it could run code, so weights_only must refuse it."""


def _state(value: float) -> dict:
    return {"step": 3, "weights": torch.full((4, 4), value), "history": [{"loss": 1.5}], "name": "run"}


def test_roundtrip(tmp_path):
    path = save_checkpoint(_state(2.0), tmp_path / "c.pt")
    state = load_checkpoint(path)
    assert state["step"] == 3 and state["history"] == [{"loss": 1.5}] and state["name"] == "run"
    assert torch.equal(state["weights"], torch.full((4, 4), 2.0))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left behind


def test_crash_during_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(_state(1.0), tmp_path / "c.pt")

    def crashing_save(obj, f):  # writes half a file, then the process "dies"
        f.write(b"PK\x03\x04 partial")  # save_checkpoint hands torch.save its open temporary file
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.torch, "save", crashing_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(_state(9.0), path)
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["weights"], torch.full((4, 4), 1.0))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_truncated_checkpoint_gives_clear_error(tmp_path):
    path = save_checkpoint(_state(1.0), tmp_path / "c.pt")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="c.pt.*truncated or corrupt"):
        load_checkpoint(path)


def test_garbage_file_gives_clear_error(tmp_path):
    path = tmp_path / "junk.pt"
    path.write_bytes(b"this is not a checkpoint" * 10)
    with pytest.raises(CheckpointError, match="junk.pt"):
        load_checkpoint(path)


def test_weights_only_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"obj": _NotWeights()}, path)
    with pytest.raises(CheckpointError, match="evil.pt"):
        load_checkpoint(path)


def test_missing_checkpoint_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_checkpoint(tmp_path / "nope.pt")


@pytest.mark.parametrize("preset", ["gpt2-style", "llama-style"])
def test_save_and_load_pretrained(tmp_path, preset):
    torch.manual_seed(0)
    tokenizer = BPETokenizer.train("the cat sat on the mat. the dog sat on the log. " * 20, vocab_size=300)
    vocab = tokenizer.vocab_size  # 278: the text runs out of pairs; the model must match the tokenizer
    model = GPT(GPTConfig.preset(preset, vocab_size=vocab, context_length=32, n_layer=2, n_head=2, d_model=32))
    save_pretrained(tmp_path, model, tokenizer, metadata={"metrics": {"val_loss": 1.25}})
    loaded, loaded_tok, config = load_pretrained(tmp_path)
    assert config["metrics"] == {"val_loss": 1.25} and config["model"] == model.config.to_dict()
    ids = torch.randint(0, vocab, (2, 32))
    assert torch.equal(loaded(ids), model.eval()(ids))
    assert (loaded.lm_head.weight is loaded.tok_emb.weight) == (preset == "gpt2-style")
    text = "the cat sat on the log."
    assert loaded_tok.encode(text) == tokenizer.encode(text) and loaded_tok.decode(loaded_tok.encode(text)) == text
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_load_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(tmp_path)
    model = GPT(GPTConfig(vocab_size=50, context_length=8, n_layer=1, n_head=1, d_model=8))
    save_pretrained(tmp_path, model)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_pretrained(tmp_path)


def test_a_checksum_file_that_is_not_utf8_is_a_named_checkpoint_error(tmp_path):
    good = "0" * 64 + "  model.safetensors\n"
    path = tmp_path / "checksums.sha256"
    path.write_bytes(good.encode() + b"\xff\xfe  config.json\n")
    with pytest.raises(CheckpointError, match=r"checksums\.sha256, line 2: not UTF-8"):
        ckpt.read_checksums(path)


# ------------------------------------------------- checksums: flipped bytes and edited files are caught
TEXT = "hello, world! the cat sat on the mat. the dog sat on the log. " * 10


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(TEXT, 300)


def _flip_inside(path: Path, tensor: torch.Tensor, count: int = 8) -> None:
    """Flip ``count`` bytes inside ``tensor``'s data as stored in ``path`` (found by its first 64 bytes)."""
    data = bytearray(path.read_bytes())
    at = data.find(tensor.detach().contiguous().numpy().tobytes()[:64])
    assert at > 0
    for i in range(at + 16, at + 16 + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _tiny(vocab: int = 300) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=vocab, context_length=16, n_layer=1, n_head=2, d_model=32))


def test_flipped_bytes_in_a_checkpoint_are_a_checkpoint_error(tmp_path):
    model = _tiny()
    path = save_checkpoint({"step": 3, "model": model.state_dict()}, tmp_path / "checkpoint.pt")
    assert load_checkpoint(path)["step"] == 3
    _flip_inside(path, model.tok_emb.weight)  # used to load, with tok_emb/lm_head quietly altered
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: checksum mismatch"):
        load_checkpoint(path)


def test_flipped_bytes_in_a_model_folder_are_a_checkpoint_error(tmp_path, tokenizer):
    model = _tiny(tokenizer.vocab_size)
    folder = save_pretrained(tmp_path / "model", model, tokenizer)
    assert (folder / CHECKSUM_FILE).read_text(encoding="ascii").count("\n") == 3
    _flip_inside(folder / MODEL_FILE, model.tok_emb.weight)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: sha256 .* does not match"):
        load_pretrained(folder)


def test_edited_tokenizer_or_head_is_caught_too(tmp_path, tokenizer):
    from minillm.alignment.reward_model import ScalarHeadModel, save_reward_model

    model = _tiny(tokenizer.vocab_size)
    folder = save_reward_model(tmp_path / "rm", ScalarHeadModel(model, 32), tokenizer)
    head = folder / "head.json"
    head.write_text(head.read_text().replace("[", "[1.0, ", 1))
    with pytest.raises(CheckpointError, match=r"head\.json: sha256"):
        load_reward_model(folder)


def test_files_saved_before_checksums_load_with_a_warning(tmp_path, tokenizer):
    model = _tiny(tokenizer.vocab_size)
    torch.save({"step": 1}, tmp_path / "old.pt")  # the layout written before checksums
    with pytest.warns(UnverifiedCheckpointWarning, match=r"old\.pt: has no checksum"):
        assert load_checkpoint(tmp_path / "old.pt") == {"step": 1}
    folder = save_pretrained(tmp_path / "old", model, tokenizer)
    (folder / CHECKSUM_FILE).unlink()
    with pytest.warns(UnverifiedCheckpointWarning, match="no checksums.sha256"):
        load_pretrained(folder)


@pytest.mark.parametrize("name", ["base", "base_long", "posttrain/sft", "posttrain/rm", "posttrain/rm_onpolicy"])
def test_committed_model_folders_verify_without_warnings(name):
    folder = data_path(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if (folder / "head.json").is_file():
            load_reward_model(folder)
        else:
            load_pretrained(folder)


def test_tokenizer_and_model_vocabularies_must_match(tmp_path, tokenizer):
    # a folder whose tokenizer.json came from another run (checksums re-recorded, so only the sizes differ)
    folder = save_pretrained(tmp_path / "m", _tiny(400))
    tokenizer.save(folder / "tokenizer.json")
    write_checksums(folder, [MODEL_FILE, "config.json", "tokenizer.json"])
    with pytest.raises(CheckpointError, match=rf"tokenizer\.json has {tokenizer.vocab_size} ids but .* vocab_size=400"):
        load_pretrained(folder)  # used to load; sampling then made ids the tokenizer cannot decode
    with pytest.raises(ValueError, match=rf"has {tokenizer.vocab_size} ids but the model has vocab_size=400"):
        save_pretrained(tmp_path / "bad", _tiny(400), tokenizer)
