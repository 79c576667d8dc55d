"""Feature extraction (`aiayn.tasks.embed`): what each pooling reads of the encoder's final states."""

import numpy as np
import pytest
import torch

from aiayn.tasks import load_pipeline
from aiayn.tasks.embed import pooling_of
from tiny_models import tiny_model

TEXTS = ["a b c", "d e f g h i", "j"]


@pytest.fixture
def embedder(tmp_path):
    return load_pipeline(tiny_model(tmp_path / "m", "embed", max_input_tokens=16))


def test_each_pooling_reads_the_states_of_the_real_positions(embedder):
    ids = [embedder.tokenizer.encode(t) for t in TEXTS]
    with torch.no_grad():
        alone = [embedder.model(torch.tensor([x]))[0].numpy() for x in ids]  # (1 + T, D) each: no padding at all
    tokens = embedder.embed(TEXTS, pooling="none")
    for mine, reference in zip(tokens, alone):
        np.testing.assert_allclose(mine, reference, atol=1e-5)  # [CLS] first, padding dropped
    np.testing.assert_allclose(embedder.embed(TEXTS, pooling="mean"), [r.mean(0) for r in alone], atol=1e-5)
    np.testing.assert_allclose(embedder.embed(TEXTS, pooling="cls"), [r[0] for r in alone], atol=1e-5)
    unit = embedder.embed(TEXTS, pooling="mean", normalize=True)
    np.testing.assert_allclose([np.linalg.norm(v) for v in unit], 1.0, atol=1e-6)


def test_the_batch_does_not_change_a_vector(embedder):
    one_by_one = [embedder.embed([t])[0] for t in TEXTS]
    np.testing.assert_allclose(embedder.embed(TEXTS, batch_size=2), one_by_one, atol=1e-5)


def test_an_unknown_pooling_is_refused(embedder):
    with pytest.raises(ValueError, match="pooling must be one of 'mean', 'cls', 'none'"):
        embedder.embed(TEXTS, pooling="max")


@pytest.mark.parametrize("modules, pooling, normalize", [
    ('[{"type": "sentence_transformers.models.Transformer"}, {"type": "sentence_transformers.models.Pooling"},'
     ' {"type": "sentence_transformers.models.Normalize"}]', {"pooling_mode_mean_tokens": True}, True),
    ('[{"type": "sentence_transformers.models.Pooling"}]', {"pooling_mode_cls_token": True}, False),
])
def test_sentence_transformers_files_give_the_pooling(tmp_path, modules, pooling, normalize):
    import json

    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (tmp_path / "modules.json").write_text(modules)
    assert pooling_of(tmp_path) == {"pooling": "mean" if "pooling_mode_mean_tokens" in pooling else "cls",
                                    "normalize": normalize}
    assert pooling_of(tmp_path / "1_Pooling") == {}  # a plain Hugging Face directory
