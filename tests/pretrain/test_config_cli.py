import subprocess
import sys

import pytest
from pydantic import Field

from pretrain.config import StrictModel, config_sha256, load_config
from pretrain.errors import ConfigError
from pretrain_app.cli import build_parser, main


class Inner(StrictModel):
    min_words: int = 50
    max_symbol_ratio: float = Field(0.1, ge=0, le=1)


class Outer(StrictModel):
    name: str = "x"
    rules: Inner = Inner()


def test_misspelt_key_is_refused_naming_key_and_valid_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rules:\n  min_wrods: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(Outer, path)
    msg = str(err.value)
    assert "rules.min_wrods" in msg and "min_words" in msg and "max_symbol_ratio" in msg


def test_set_overrides_are_type_checked_and_change_the_hash(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: a\n")
    base = load_config(Outer, path)
    changed = load_config(Outer, path, ["rules.min_words=7"])
    assert changed.rules.min_words == 7
    assert config_sha256(base) != config_sha256(changed)
    assert config_sha256(base) == config_sha256(load_config(Outer, path))
    with pytest.raises(ConfigError, match="rules.max_symbol_ratio"):
        load_config(Outer, path, ["rules.max_symbol_ratio=3"])
    with pytest.raises(ConfigError, match="unknown key 'rules.nope'"):
        load_config(Outer, path, ["rules.nope=1"])
    with pytest.raises(ConfigError, match="not of the form"):
        load_config(Outer, path, ["justakey"])


def test_bad_yaml_and_missing_file_are_one_line_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(Outer, path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Outer, tmp_path / "missing.yaml")


def test_help_lists_every_command_of_the_design():
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    assert {
        "verify",
        "data",
        "tokenizer",
        "mixture",
        "plan",
        "launch",
        "ablate",
        "eval",
    } <= commands
    out = subprocess.run(
        [sys.executable, "-m", "pretrain_app", "data", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    for sub in ("run", "train-lm", "train-classifier"):
        assert sub in out.stdout


def test_user_error_exits_2_with_one_line(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pretrain verify: error:") and err.count("\n") == 1


class Listed(StrictModel):
    parts: list[Inner] = []
    tags: list[str] = []


def test_set_reaches_list_items_with_type_checks(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("parts: [{min_words: 1}, {min_words: 2}]\ntags: [a]\n")
    config = load_config(Listed, path, ["parts.0.min_words=9", "parts.-1.max_symbol_ratio=0.5"])
    assert [p.min_words for p in config.parts] == [9, 2]
    assert config.parts[1].max_symbol_ratio == 0.5
    appended = load_config(Listed, path, ["parts.+={min_words: 3}", "tags.+=b", "tags.0=z"])
    assert [p.min_words for p in appended.parts] == [1, 2, 3] and appended.tags == ["z", "b"]
    # the same type checks as the file: the bad value is named with its list position
    with pytest.raises(ConfigError, match="parts.1.max_symbol_ratio"):
        load_config(Listed, path, ["parts.1.max_symbol_ratio=3"])
    with pytest.raises(ConfigError, match="unknown key 'parts.0.min_wrods'"):
        load_config(Listed, path, ["parts.0.min_wrods=3"])
    with pytest.raises(ConfigError, match="out of range for a list of 2 items"):
        load_config(Listed, path, ["parts.2.min_words=3"])
    with pytest.raises(ConfigError, match="indexes a list of 2 items"):
        load_config(Listed, path, ["parts.first.min_words=3"])
    section = tmp_path / "s.yaml"
    section.write_text("rules: {min_words: 3}\n")
    with pytest.raises(ConfigError, match="appends to a list"):
        load_config(Outer, section, ["rules.+=3"])
    with pytest.raises(ConfigError, match="not a list in this config"):
        load_config(Listed, tmp_path / "c.yaml", ["missing.0=1"])
    # the file on disk is untouched by overrides
    assert load_config(Listed, path).parts[0].min_words == 1


def test_set_on_a_mixture_component_changes_the_recipe(tmp_path):
    from mixtures.recipe import MixtureConfig

    base = load_config(MixtureConfig, "configs/mixture.yaml")
    changed = load_config(MixtureConfig, "configs/mixture.yaml", ["recipe.components.0.weight=0.5"])
    assert base.recipe.components[0].weight != 0.5
    assert changed.recipe.components[0].weight == 0.5
    assert changed.recipe.components[1] == base.recipe.components[1]
    with pytest.raises(ConfigError, match="recipe.components.3.max_epochs"):
        load_config(MixtureConfig, "configs/mixture.yaml", ["recipe.components.3.max_epochs=x"])
    # the bracket form a user types from Python or jq means the same list item (it created a key
    # named `components[2]` and was refused as unknown, without saying which form works)
    bracket = ["recipe.components[2].weight=0", "recipe.components[-1].max_epochs=3"]
    dotted = ["recipe.components.2.weight=0", "recipe.components.-1.max_epochs=3"]
    assert load_config(MixtureConfig, "configs/mixture.yaml", bracket) == load_config(
        MixtureConfig, "configs/mixture.yaml", dotted
    )
    with pytest.raises(ConfigError, match="out of range for a list of"):
        load_config(MixtureConfig, "configs/mixture.yaml", ["recipe.components[99].weight=0"])


def test_duplicate_key_is_refused_naming_key_and_lines(tmp_path):
    """YAML takes the last of two equal keys silently: `output:` written twice would send the
    run somewhere the reader of the file did not expect."""
    path = tmp_path / "c.yaml"
    path.write_text("name: a\nrules:\n  min_words: 3\n  min_words: 9\n")
    with pytest.raises(ConfigError, match=r"c.yaml line 4: key 'min_words' appears twice"):
        load_config(Outer, path)
    path.write_text("name: a\nname: b\n")
    with pytest.raises(ConfigError, match="line 2: key 'name' appears twice.*line 1"):
        load_config(Outer, path)
    path.write_text("rules: {min_words: 3, min_words: 4}\n")
    with pytest.raises(ConfigError, match="line 1: key 'min_words' appears twice"):
        load_config(Outer, path)
    path.write_text("base: &base {min_words: 3}\nrules:\n  <<: *base\n  min_words: 4\n")
    with pytest.raises(ConfigError, match="unknown key 'base'"):  # a merge key may be overridden
        load_config(Outer, path)


def test_duplicate_key_in_a_set_override_is_refused(tmp_path):
    """`--set rules={min_words: 3, min_words: 9}` took the last value silently, as the file
    did before duplicate keys were refused there."""
    path = tmp_path / "c.yaml"
    path.write_text("name: a\n")
    with pytest.raises(ConfigError, match=r"--set .*key 'min_words' appears twice"):
        load_config(Outer, path, ["rules={min_words: 3, min_words: 9}"])
    assert load_config(Outer, path, ["rules={min_words: 9}"]).rules.min_words == 9


def test_config_that_is_not_utf8_or_has_a_python_tag_is_a_one_line_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xff\xfename: a\n")
    with pytest.raises(ConfigError, match="c.yaml: not UTF-8 text"):
        load_config(Outer, path)
    path.write_text("name: !!python/object/apply:os.system ['touch pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(Outer, path)
    assert not (tmp_path / "pwned").exists()


LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))


def test_alias_expansion_is_bounded_in_files_and_overrides(tmp_path):
    """A "billion laughs" config: 9 anchors of 9 aliases each is 900 bytes that every copy,
    dump and hash of the config expands to 9^9 lists. Refused in one line before any copy."""
    path = tmp_path / "c.yaml"
    path.write_text("l0: &l0 [x]\n" + LAUGHS + "name: a\n")
    with pytest.raises(ConfigError, match=r"c.yaml line \d+: aliases expand the document past"):
        load_config(Outer, path)
    many = "".join(f"k{i}: &k{i} {i}\n" for i in range(101))
    path.write_text(many + "".join(f"r{i}: *k{i}\n" for i in range(101)))
    with pytest.raises(ConfigError, match="more than 100 aliases"):
        load_config(Outer, path)
    path.write_text("name: &a [*a]\n")  # a list that contains itself
    with pytest.raises(ConfigError, match="line 1: an alias refers to a value that contains it"):
        load_config(Outer, path)
    bomb = "[&a [x, x, x, x, x, x, x, x, x], " + ", ".join(
        f"&{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)
    )
    path.write_text("name: a\n")
    with pytest.raises(ConfigError, match="--set .*aliases expand the document past"):
        load_config(Outer, path, [f"name={bomb}]"])


def test_anchors_a_config_needs_still_work(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("x: &r {min_words: 3}\nrules:\n  <<: *r\n  max_symbol_ratio: 0.2\n")
    with pytest.raises(ConfigError, match="unknown key 'x'"):  # the merge itself was read
        load_config(Outer, path)
    path.write_text("name: &n a\nrules: {min_words: 3}\n")
    assert load_config(Outer, path).name == "a"


def test_alias_bomb_exits_2_with_one_line_from_the_cli(tmp_path, capsys):
    path = tmp_path / "pipeline.yaml"
    path.write_text("l0: &l0 [x]\n" + LAUGHS)
    assert main(["data", "run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "aliases expand the document past" in err and err.count("\n") == 1
