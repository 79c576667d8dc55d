"""`TranslationPipeline.targeted`: how a multilingual model (one source, a tag per target) is told its target."""

import pytest

from aiayn.tasks import load_pipeline
from tiny_models import tiny_model

MULTI = {"target_tag": "<2{}>", "directions": [["en", "de"], ["en", "fr"], ["en", "cs"]]}


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    return load_pipeline(tiny_model(tmp_path_factory.mktemp("multi") / "m", "translation", **MULTI))


def test_the_target_tags_each_text_once(multi):
    assert multi.targeted(["a b", " c ", ""], "fr") == ["<2fr> a b", "<2fr> c", ""]  # a blank line stays blank
    assert multi.targeted(["<2cs> a b"], None) == ["<2cs> a b"]  # a tag typed in the text names the target


@pytest.mark.parametrize("texts, target, message", [
    (["a b"], "es", r"target 'es': this model translates into de, fr, cs"),
    (["a b"], None, r"this model translates into de, fr, cs: name the target \(--target, target=, or a tag"),
    (["<2fr> a b"], "de", r"text 1 starts with the tag '<2fr>', and the target is 'de': name the target once"),
    (["<2xx> a b"], None, r"text 1: unknown target tag '<2xx>'; this model translates into de, fr, cs"),
])
def test_a_target_that_is_missing_unknown_or_given_twice_is_refused(multi, texts, target, message):
    with pytest.raises(ValueError, match=message):
        multi(texts, target=target)


def test_a_model_of_one_pair_takes_its_own_target_or_none(tmp_path):
    one = load_pipeline(tiny_model(tmp_path / "m", "translation"))  # languages de -> en, no tag
    assert one.targeted(["a b"], "en") == one.targeted(["a b"], None) == ["a b"]
    with pytest.raises(ValueError, match="target 'fr': this model translates into en"):
        one(["a b"], target="fr")
