"""Issue #16, findings 5, 8, 9 and 10: files and settings from outside are checked, never trusted.

Each test reproduces one finding (what used to load, run or fail late) and checks that it is now refused
early with a message that names the offending value or file.
"""

import importlib
import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from tokenizer_corpus import rescan_encode

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
from minillm.end_to_end.presets import RunSize, SFTSize, get_run_size
from minillm.model import GPT, GPTConfig, sample_next_token
from minillm.paths import data_path
from minillm.tokenizer import GPT4_PATTERN, BPETokenizer, pretokenize, to_tokenizers
from minillm.tokenizer.pretokenize import PATTERN_PROBE
from minillm.train.cli import main as train_main
from minillm.train.config import ConfigError, TrainConfig

TEXT = "hello, world! the cat sat on the mat. the dog sat on the log. " * 10


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(TEXT, 300)


def _with_pattern(tokenizer: BPETokenizer, folder: Path, pattern: str) -> Path:
    """A tokenizer file as someone else might hand it over: ours, with its pattern replaced."""
    document = json.loads(tokenizer.save(folder / "good.json").read_text(encoding="utf-8"))
    path = folder / "tokenizer.json"
    path.write_text(json.dumps({**document, "pattern": pattern}), encoding="utf-8")
    return path


# ------------------------------------------------------------------------ 5: hostile tokenizer files
def test_catastrophic_pattern_in_a_file_is_refused_before_any_encode(tokenizer, tmp_path, monkeypatch):
    # (a|a)+$ takes exponential time on "aaa...a!" (about 2.7 s at 22 letters, doubling with each one);
    # the file is refused at load, so no text ever reaches the regex and no timing is needed
    path = _with_pattern(tokenizer, tmp_path, r"(a|a)+$")
    compiled = []
    module = importlib.import_module("minillm.tokenizer.pretokenize")  # the name alone is the function
    monkeypatch.setattr(module.regex, "compile", lambda *a, **k: compiled.append(a))
    with pytest.raises(ValueError, match=r"tokenizer\.json: pre-tokenization pattern '\(a\|a\)\+\$' is not one"):
        BPETokenizer.load(path)
    assert compiled == []  # never even compiled
    with pytest.raises(ValueError, match="allow_custom_pattern=True"):
        BPETokenizer([], pattern=r"(a+)+$")


def test_opted_in_pattern_that_backtracks_is_refused_by_the_probe(tokenizer, tmp_path):
    # a custom pattern the caller vouches for still has to split the probe text in under a second
    path = _with_pattern(tokenizer, tmp_path, r"(a|a)+$|[\s\S]")
    with pytest.raises(ValueError, match=r"tokenizer\.json: .*catastrophic backtracking"):
        BPETokenizer.load(path, allow_custom_pattern=True)


def test_custom_pattern_that_drops_text_is_refused(tokenizer, tmp_path):
    path = _with_pattern(tokenizer, tmp_path, r"\w+")  # used to decode "hello, world!" as "helloworld"
    with pytest.raises(ValueError, match=r"tokenizer\.json: .*'\\\\w\+' does not cover every character.*','"):
        BPETokenizer.load(path, allow_custom_pattern=True)
    with pytest.raises(ValueError, match="does not cover every character"):
        BPETokenizer.train(TEXT, 300, pattern=r"\w+", allow_custom_pattern=True)
    with pytest.raises(ValueError, match="capturing group"):
        BPETokenizer([], pattern=r"(\w+)|(\W+)", allow_custom_pattern=True)


def test_opted_in_lossless_pattern_round_trips_and_agrees_with_tokenizers(tmp_path):
    pattern = r"[A-Za-z]+| ?[0-9]+|\s+|[^\sA-Za-z0-9]"
    tok = BPETokenizer.train(TEXT + " 123 456", 300, pattern=pattern, allow_custom_pattern=True)
    path = tok.save(tmp_path / "custom.json")
    assert json.loads(path.read_text(encoding="utf-8"))["pattern"] == pattern
    with pytest.raises(ValueError, match="not one of the named presets"):
        BPETokenizer.load(path)  # a file's own regex always needs the caller's consent
    loaded = BPETokenizer.load(path, allow_custom_pattern=True)
    text = "hello, world! 42 cats\n\n  sat."
    assert loaded.decode(loaded.encode(text)) == text
    assert to_tokenizers(loaded).encode(text).ids == loaded.encode(text)


def test_presets_cover_the_probe_and_are_saved_by_name(tmp_path):
    for name in ("gpt2", "gpt4", "none"):
        assert "".join(pretokenize(PATTERN_PROBE, name)) == PATTERN_PROBE
    tok = BPETokenizer([], special_tokens=(), pattern=GPT4_PATTERN)  # the regex itself is the preset
    assert tok.pattern == "gpt4"
    assert json.loads(tok.save(tmp_path / "t.json").read_text(encoding="utf-8"))["pattern"] == "gpt4"
    with pytest.raises(ValueError, match="not one of the named presets"):
        pretokenize("a b", r"\S+")


# ------------------------------------------------------------------------------- 8: silent corruption
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


# ------------------------------------------------------------ 9: quadratic encode on long unspaced text
class _CountingRanks(dict):
    """A merge table that counts how often a pair is looked up: encoding work, measured without a clock."""

    lookups = 0

    def get(self, key, default=None):
        self.lookups += 1
        return super().get(key, default)

    def __getitem__(self, key):
        self.lookups += 1
        return super().__getitem__(key)

    def __contains__(self, key):
        self.lookups += 1
        return super().__contains__(key)


@pytest.fixture(scope="module")
def letters_tokenizer() -> BPETokenizer:
    import random

    words = ("".join(random.Random(i).choices("abcdef", k=7)) for i in range(400))
    return BPETokenizer.train(" ".join(words), 400)


def _unspaced(letters: int) -> str:
    import random

    return "".join(random.Random(letters).choices("abcdef", k=letters))


def test_the_rescanning_encode_does_quadratic_work(letters_tokenizer):
    """The finding, reproduced: rescanning per merge costs ≈ n × merges lookups (200 000 letters: 11.9 s)."""
    ranks = _CountingRanks(letters_tokenizer._ranks)
    ids = rescan_encode(list(_unspaced(2_000).encode()), ranks)
    assert letters_tokenizer.decode(ids) == _unspaced(2_000)
    assert ranks.lookups > 50 * 2_000  # far above any linear bound


@pytest.mark.parametrize("letters", [2_000, 16_000, 128_000])
def test_encode_work_on_unspaced_text_is_linear_in_its_length(letters_tokenizer, letters, monkeypatch):
    """The heap-based encode looks each new pair up a bounded number of times: n - 1 initial pairs, one check
    per popped candidate and two new pairs per merge, with fewer than n merges and pops — so ≤ 8n lookups."""
    text = _unspaced(letters)
    ranks = _CountingRanks(letters_tokenizer._ranks)
    monkeypatch.setattr(letters_tokenizer, "_ranks", ranks)
    ids = letters_tokenizer.encode(text)
    assert letters_tokenizer.decode(ids) == text and len(ids) < letters / 2  # it did merge, a lot
    assert 0 < ranks.lookups <= 8 * letters, (ranks.lookups, letters)


# ---------------------------------------------------------- 10: unclear or late errors (library side)
def test_tokenizer_and_model_vocabularies_must_match(tmp_path, tokenizer):
    # a folder whose tokenizer.json came from another run (checksums re-recorded, so only the sizes differ)
    folder = save_pretrained(tmp_path / "m", _tiny(400))
    tokenizer.save(folder / "tokenizer.json")
    write_checksums(folder, [MODEL_FILE, "config.json", "tokenizer.json"])
    with pytest.raises(CheckpointError, match=rf"tokenizer\.json has {tokenizer.vocab_size} ids but .* vocab_size=400"):
        load_pretrained(folder)  # used to load; sampling then made ids the tokenizer cannot decode
    with pytest.raises(ValueError, match=rf"has {tokenizer.vocab_size} ids but the model has vocab_size=400"):
        save_pretrained(tmp_path / "bad", _tiny(400), tokenizer)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(d_ff=True), "d_ff must be a positive int or None, got True"),
        (dict(norm_eps=-1.0), "norm_eps must be a small positive number .* got -1.0"),
        (dict(norm_eps=float("nan")), "norm_eps must be"),
        (dict(rope_base=0.0, pos="rope"), "rope_base must be a positive number"),
        (dict(bias=1), "bias must be true or false, got 1"),
        (dict(n_head=3), r"n_head=3 does not divide d_model=128; .* choose n_head from \[1, 2, 4, 8, 16, 32\]"),
    ],
)
def test_gpt_config_refuses_values_that_used_to_pass(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**kwargs)


@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), True])
def test_sampling_temperature_is_checked_before_torch(temperature):
    model = _tiny()
    with pytest.raises(
        ValueError, match=re.escape(f"temperature must be a finite number ≥ 0 (0 = greedy), got {temperature!r}")
    ):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=temperature)
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        sample_next_token(torch.zeros(1, 5), temperature=temperature)


def test_unknown_pipeline_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown pipeline preset 'bogus'; choose one of \['course', .*'tiny'\]"):
        get_run_size("bogus")
    assert get_run_size("tiny") is get_run_size("tiny")  # built once
    with pytest.raises(ValueError, match=r"a run size does not set \['out_dir'\]: the run itself chooses them"):
        RunSize(pretrain={"out_dir": "x"}, sft=SFTSize(steps=1, lr=1e-3), align=get_run_size("tiny").align)
    with pytest.raises(ConfigError, match="n_head=3 does not divide d_model=32"):
        RunSize(pretrain={"n_head": 3, "d_model": 32}, sft=SFTSize(steps=1, lr=1e-3), align=get_run_size("tiny").align)


# ------------------------------------------------------------ 10: run settings, checked when built
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(threads=0), "threads must be at least 1 .* got 0"),
        (dict(device="tpu"), "device 'tpu' is not a device name; use 'auto', 'cpu'"),
        (dict(lr="0.01"), "lr must be a number, got '0.01' .*without quotes"),
        (dict(n_layer="4"), "n_layer must be an integer, got '4'"),
        (dict(progress="yes"), "progress must be true or false"),
        (dict(n_head=3), "n_head=3 does not divide d_model=128"),
        (dict(preset="bogus"), r"unknown preset 'bogus'; choose from \['gpt2-small', 'gpt2-style', 'llama-style'\]"),
        (dict(schedule="cosin"), "unknown schedule 'cosin'"),
        (dict(max_steps=10, warmup_steps=50), r"warmup_steps=50 is longer than the run \(max_steps=10\)"),
        (dict(vocab_size=200), "vocab_size=200 leaves no room for merges"),
        (dict(lr=float("nan")), "lr must be a finite number"),
    ],
)
def test_train_config_refuses_bad_settings(settings, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**settings)
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(settings)


def test_config_files_with_bad_json_or_types_name_the_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"lr": 0.01,}\n')  # used to be a raw JSONDecodeError
    with pytest.raises(
        ConfigError, match=r"run\.json: not valid JSON: .* line 1, column 13; check for a trailing comma"
    ):
        TrainConfig.from_json(path)
    path.write_text('{"lr": "0.01"}\n')  # used to be accepted, then a TypeError in the optimizer
    with pytest.raises(ConfigError, match=r"run\.json: lr must be a number, got '0.01'"):
        TrainConfig.from_json(path)
    path.write_text('{"batchsize": 8}\n')
    with pytest.raises(ConfigError, match="did you mean 'batch_size'"):
        TrainConfig.from_json(path)
    with pytest.raises(FileNotFoundError, match=r"nope\.json: config file not found"):
        TrainConfig.from_json(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--n-head", "3"], "n_head=3 does not divide d_model=32"),
        (["--preset", "bogus"], "unknown preset 'bogus'"),
        (["--threads", "0"], "threads must be at least 1"),
        (["--device", "tpu"], "device 'tpu' is not a device name"),
        (["--device", "cuda"], "'cuda' was requested but torch sees no CUDA GPU here"),
    ],
)
def test_train_command_line_stops_before_any_work(tmp_path, flags, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on the course's CPU machines
    train = tmp_path / "train.txt"
    train.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["--train-file", str(train), "--val-file", "none", "--out-dir", str(out), "--vocab-size", "300",
            "--n-layer", "1", "--d-model", "32", "--context-length", "16", "--max-steps", "2",
            "--warmup-steps", "1", "--no-progress", *flags]  # fmt: skip
    # used to fail only after training the tokenizer (--n-head, --preset) or inside torch (--threads, --device)
    with pytest.raises((ConfigError, SystemExit), match=message):
        train_main(argv)
    assert not out.exists()  # no tokenizer trained, no token files written


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--threads", "0"], "--threads must be"),
        (["--device", "tpu"], "--device: device 'tpu'"),
        (["--device", "cuda"], "--device: device 'cuda' was requested but torch sees no CUDA GPU"),
    ],
)
def test_pipeline_refuses_bad_threads_and_devices_before_any_work(tmp_path, flags, message, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from minillm.end_to_end.cli import main as pipeline_main

    with pytest.raises(SystemExit, match=message):
        pipeline_main(["--preset", "tiny", "--run-dir", str(tmp_path / "run"), *flags])
    assert not (tmp_path / "run").exists()


def test_text_too_short_for_one_window_is_refused_with_its_numbers(tmp_path):
    """Used to pass the up-front checks, train a tokenizer, then crash inside RandomWindows with a traceback."""
    from minillm.end_to_end.cli import main as pipeline_main

    short = tmp_path / "short.txt"
    short.write_text("Hello there, a short story.\n\nAnother short one here.\n\nAnd a third.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"short.txt: 53 bytes of training text .*context_length \+ 1 = 257"):
        pipeline_main(["--preset", "tiny", "--text", str(short), "--run-dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()
    # the train command line finds out after tokenising (tokens, not bytes, fill a window) and says so
    train = tmp_path / "train.txt"
    train.write_text(TEXT, encoding="utf-8")
    argv = ["--train-file", str(train), "--val-file", "none", "--out-dir", str(tmp_path / "out"), "--vocab-size",
            "300", "--n-layer", "1", "--d-model", "32", "--context-length", "1024", "--max-steps", "2",
            "--warmup-steps", "1", "--no-progress", "--device", "cpu"]  # fmt: skip
    with pytest.raises(SystemExit, match=r"train.txt: [0-9,]+ tokens after tokenisation, fewer than one train window"):
        train_main(argv)


def test_a_config_file_valid_only_with_its_flags_is_accepted(tmp_path):
    """Flags are laid over the file before the whole is checked (max_steps 10 needs warmup below 10)."""
    from minillm.train.cli import build_parser, config_from_args

    path = tmp_path / "short.json"
    path.write_text('{"max_steps": 10}', encoding="utf-8")
    config = config_from_args(build_parser().parse_args(["--config", str(path), "--warmup-steps", "2"]))
    assert (config.max_steps, config.warmup_steps) == (10, 2)
    with pytest.raises(ConfigError, match="short.json with the flags given"):
        config_from_args(build_parser().parse_args(["--config", str(path)]))
